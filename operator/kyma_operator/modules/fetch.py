"""Files a module config names by URL (``manifest: https://...``), fetched with limits.

Why: upstream modulectl accepts ``manifest`` and ``defaultCR`` as URLs (its ``UrlOrLocalFile``) and
the shared modulectl sample names its release assets that way, so ``kyma module create`` must too
(issue 24 item 5). A URL is outside the author's machine: it may hang, be huge or be gone, and the
command must then stop with one line naming the field and the URL, before anything is written. So
every fetch has a size limit (read as a stream, cut at the limit, never buffered beyond it), a
timeout for connecting and for each read, and no retries. TLS is verified against the system trust
store or a CA bundle the caller gives; tests inject a transport or a CA instead of patching.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

DEFAULT_LIMIT = 64 * 2**20
"""64 MiB: a module's raw manifest (CRDs included) is a few MiB; anything far larger is a mistake."""
DEFAULT_TIMEOUT = 30.0


class FetchError(ValueError):
    """A URL could not be fetched; the message names the URL and why."""


def is_url(value: str) -> bool:
    """A value with a scheme and a host (modulectl's rule); anything else is a local path."""
    parts = urlsplit(value)
    return bool(parts.scheme) and bool(parts.netloc) and parts.scheme in ("http", "https")


@dataclass(frozen=True)
class Fetcher:
    """GETs URLs with a size limit and a timeout (``verify``: a CA context, or True for the system's)."""

    limit: int = DEFAULT_LIMIT
    timeout: float = DEFAULT_TIMEOUT
    verify: ssl.SSLContext | bool = True
    transport: httpx.AsyncBaseTransport | None = field(default=None, compare=False)

    async def get(self, url: str) -> bytes:
        if not is_url(url):
            raise FetchError(f"{url}: not an http(s) URL")
        try:
            async with (
                httpx.AsyncClient(
                    verify=self.verify,
                    timeout=httpx.Timeout(self.timeout),
                    transport=self.transport,
                    follow_redirects=True,
                    max_redirects=5,
                    trust_env=False,
                ) as client,
                client.stream("GET", url) as response,
            ):
                if response.status_code != 200:
                    raise FetchError(f"{url}: HTTP {response.status_code} {response.reason_phrase}".rstrip())
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > self.limit:
                    raise FetchError(f"{url}: too large ({int(declared)} bytes, limit {self.limit})")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self.limit:
                        raise FetchError(f"{url}: too large (more than {self.limit} bytes)")
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.TimeoutException:
            raise FetchError(f"{url}: no answer within {self.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise FetchError(f"{url}: cannot fetch: {_reason(exc)}") from None


def _reason(exc: httpx.HTTPError) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS certificate not trusted ({cause.verify_message})"
        cause = cause.__cause__ or cause.__context__
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
