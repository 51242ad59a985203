"""A small async OCI distribution client: blobs and manifests, pushed and pulled with digest checks.

Why httpx and not the ``oras`` Python library: oras-py is synchronous and built on ``requests`` (a
second HTTP stack next to the project's httpx, blocking the operator's event loop), has no type hints
(mypy --strict), does not verify pulled blobs against their digest, and reads credentials only from
files, whereas the Manifest controller gets a ``.dockerconfigjson`` payload from a Secret. The part of
the distribution API a module needs is small: HEAD/GET/PUT of manifests, HEAD/GET of blobs and the
two-step blob upload, plus the Basic and Bearer-token auth challenges. That is this module.

Guarantees: every pulled blob or manifest is hashed while streaming and rejected unless it matches
the digest asked for (and stays under a size limit); plain HTTP is used only when ``insecure=True``;
secrets are sent only to the registry host (httpx drops ``Authorization`` on cross-origin redirects).
Progress callbacks receive byte counts as data moves.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx

from kyma_operator.modules import constants as c
from kyma_operator.modules.auth import Credentials
from kyma_operator.runtime.tlscancel import cancel_safe

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_BLOB_BYTES = 256 * 1024 * 1024
_CHUNK = 256 * 1024
_MANIFEST_ACCEPT = ", ".join(
    (c.OCI_MANIFEST_MEDIA_TYPE, c.DOCKER_MANIFEST_MEDIA_TYPE, c.OCI_INDEX_MEDIA_TYPE)
)
_TRANSIENT = frozenset({429, 500, 502, 503, 504})
_BACKOFF = (0.05, 0.2, 0.5, 1.0)
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')

Progress = Callable[[int], None]


class RegistryError(RuntimeError):
    """A registry request failed; the message names the registry, repository and reason."""


class NotFoundError(RegistryError):
    pass


class UnauthorizedError(RegistryError):
    pass


class DigestMismatchError(RegistryError):
    pass


class BlobUnknownError(RegistryError):
    """The registry refused a manifest because a blob it references is (no longer) there."""


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Manifest:
    media_type: str
    data: bytes
    digest: str


class RegistryClient:
    """Talks to one registry host; use as ``async with RegistryClient(...) as client``."""

    def __init__(
        self,
        registry: str,
        *,
        credentials: Credentials | None = None,
        insecure: bool = False,
        verify: ssl.SSLContext | str | bool = True,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.registry = registry
        self._credentials = credentials
        self._base = f"{'http' if insecure else 'https'}://{registry}"
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport or cancel_safe(httpx.AsyncHTTPTransport(verify=verify)),
            follow_redirects=True,
        )
        self._tokens: dict[str, str] = {}
        self._basic = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    # -- auth ----------------------------------------------------------------------------------------

    def _auth_headers(self, scope: str) -> dict[str, str]:
        token = self._tokens.get(scope)
        if token is not None:
            return {"Authorization": f"Bearer {token}"}
        if self._basic and self._credentials is not None:
            return {"Authorization": _basic(self._credentials)}
        return {}

    async def _authenticate(self, response: httpx.Response, scope: str, repo: str) -> None:
        challenge = response.headers.get("WWW-Authenticate", "")
        kind = challenge.split(" ", 1)[0].lower()
        if kind == "basic":
            if self._credentials is None:
                raise UnauthorizedError(
                    f"{self.registry}/{repo}: registry needs credentials (docker login; credential "
                    "helpers are not supported, the registry needs an entry in the config's auths)"
                )
            self._basic = True
            return
        if kind != "bearer":
            raise UnauthorizedError(f"{self.registry}/{repo}: unsupported auth challenge {challenge!r}")
        params = dict(_CHALLENGE_PARAM.findall(challenge))
        realm = params.get("realm")
        if not realm:
            raise UnauthorizedError(f"{self.registry}/{repo}: bearer challenge without realm")
        query = {"scope": scope}
        if "service" in params:
            query["service"] = params["service"]
        headers = {"Authorization": _basic(self._credentials)} if self._credentials else {}
        try:
            reply = await self._client.get(realm, params=query, headers=headers)
        except httpx.HTTPError as exc:
            raise RegistryError(f"{self.registry}: token service {realm} unreachable: {exc}") from exc
        if reply.status_code != 200:
            raise UnauthorizedError(f"{self.registry}/{repo}: token service refused ({reply.status_code})")
        body = reply.json()
        token = body.get("token") or body.get("access_token")
        if not isinstance(token, str):
            raise UnauthorizedError(f"{self.registry}/{repo}: token service returned no token")
        self._tokens[scope] = token

    async def _send(
        self,
        method: str,
        url: str,
        repo: str,
        *,
        push: bool = False,
        headers: dict[str, str] | None = None,
        content: bytes | AsyncIterator[bytes] | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        scope = f"repository:{repo}:{'pull,push' if push else 'pull'}"
        target = url if url.startswith(("http://", "https://")) else self._base + url
        authenticated = False
        attempt = 0
        while True:
            request = self._client.build_request(
                method, target, headers={**(headers or {}), **self._auth_headers(scope)}, content=content
            )
            try:
                response = await self._client.send(request, stream=stream)
            except httpx.HTTPError as exc:
                reason = str(exc) or type(exc).__name__
                raise RegistryError(f"cannot reach registry {self.registry}: {reason}") from exc
            retry_auth = response.status_code == 401 and not authenticated
            retry_busy = response.status_code in _TRANSIENT and attempt < len(_BACKOFF)
            if not (retry_auth or retry_busy) or (content is not None and not isinstance(content, bytes)):
                return response  # a streamed body cannot be sent twice; push_blob retries the upload
            await response.aclose()
            if retry_auth:
                authenticated = True
                await self._authenticate(response, scope, repo)
            else:
                # registries answer 5xx/429 under concurrent writes of the same blob; every request
                # here is idempotent, so retry a few times with a growing pause
                await asyncio.sleep(_BACKOFF[attempt])
                attempt += 1

    def _fail(self, response: httpx.Response, what: str) -> RegistryError:
        detail = response.text[:200].strip() if not response.is_stream_consumed or response.is_closed else ""
        message = f"{self.registry}: {what}: HTTP {response.status_code}" + (f" {detail}" if detail else "")
        if response.status_code == 404:
            return NotFoundError(message)
        if response.status_code in (401, 403):
            return UnauthorizedError(message)
        return RegistryError(message)

    # -- blobs ---------------------------------------------------------------------------------------

    async def blob_exists(self, repo: str, digest: str) -> bool:
        response = await self._send("HEAD", f"/v2/{repo}/blobs/{digest}", repo)
        if response.status_code == 200:
            return True
        if response.status_code == 404:
            return False
        raise self._fail(response, f"HEAD blob {repo}@{digest}")

    async def push_blob(self, repo: str, data: bytes, *, progress: Progress | None = None) -> str:
        """Upload ``data`` unless the registry has it; returns its digest.

        Parallel pushes of the same blob race inside the registry (an upload may fail while another
        one of the same content completes), so a failed upload starts over, first checking again
        whether the blob has arrived meanwhile.
        """
        digest = sha256_digest(data)
        for attempt in range(len(_BACKOFF) + 1):
            if await self.blob_exists(repo, digest):
                if progress is not None:
                    progress(len(data))
                return digest
            start = await self._send("POST", f"/v2/{repo}/blobs/uploads/", repo, push=True)
            if start.status_code != 202 or "Location" not in start.headers:
                raise self._fail(start, f"start upload to {repo}")
            location = httpx.URL(self._base).join(start.headers["Location"])
            location = location.copy_merge_params({"digest": digest})
            sent = 0

            async def chunks() -> AsyncIterator[bytes]:
                nonlocal sent
                for offset in range(0, len(data), _CHUNK):
                    part = data[offset : offset + _CHUNK]
                    yield part
                    sent += len(part)
                    if progress is not None:
                        progress(len(part))

            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(data))}
            done = await self._send("PUT", str(location), repo, push=True, headers=headers, content=chunks())
            if done.status_code == 201:
                return digest
            if attempt == len(_BACKOFF) or done.status_code not in (*_TRANSIENT, 404):
                raise self._fail(done, f"upload blob {digest} to {repo}")
            if progress is not None and sent:
                progress(-sent)
            await asyncio.sleep(_BACKOFF[attempt])
        raise AssertionError("unreachable")

    async def pull_blob(
        self,
        repo: str,
        digest: str,
        *,
        max_bytes: int = DEFAULT_MAX_BLOB_BYTES,
        progress: Progress | None = None,
    ) -> bytes:
        """The blob ``digest`` of ``repo``, verified against the digest while streaming."""
        if not digest.startswith("sha256:"):
            raise RegistryError(f"unsupported digest {digest!r} (only sha256)")
        response = await self._send("GET", f"/v2/{repo}/blobs/{digest}", repo, stream=True)
        try:
            if response.status_code != 200:
                await response.aread()
                raise self._fail(response, f"blob {repo}@{digest}")
            hasher = hashlib.sha256()
            parts: list[bytes] = []
            size = 0
            async for part in response.aiter_bytes(_CHUNK):
                size += len(part)
                if size > max_bytes:
                    raise RegistryError(
                        f"{self.registry}: blob {repo}@{digest} is larger than {max_bytes} bytes"
                    )
                hasher.update(part)
                parts.append(part)
                if progress is not None:
                    progress(len(part))
        finally:
            await response.aclose()
        actual = "sha256:" + hasher.hexdigest()
        if actual != digest:
            raise DigestMismatchError(f"{self.registry}: blob {repo}@{digest} has digest {actual}")
        return b"".join(parts)

    # -- manifests -----------------------------------------------------------------------------------

    async def push_manifest(self, repo: str, reference: str, data: bytes, media_type: str) -> str:
        response = await self._send(
            "PUT", f"/v2/{repo}/manifests/{reference}", repo, push=True,
            headers={"Content-Type": media_type}, content=data,
        )  # fmt: skip
        if response.status_code != 201:
            error = self._fail(response, f"push manifest {repo}:{reference}")
            if response.status_code == 400 and "BLOB_UNKNOWN" in response.text:
                raise BlobUnknownError(str(error))
            raise error
        return sha256_digest(data)

    async def pull_manifest(self, repo: str, reference: str) -> Manifest:
        response = await self._send(
            "GET", f"/v2/{repo}/manifests/{reference}", repo, headers={"Accept": _MANIFEST_ACCEPT}
        )
        if response.status_code != 200:
            raise self._fail(response, f"manifest {repo}:{reference}")
        data = response.content
        if len(data) > MAX_MANIFEST_BYTES:
            raise RegistryError(
                f"{self.registry}: manifest {repo}:{reference} is larger than {MAX_MANIFEST_BYTES}"
            )
        digest = sha256_digest(data)
        if reference.startswith("sha256:") and digest != reference:
            raise DigestMismatchError(f"{self.registry}: manifest {repo}@{reference} has digest {digest}")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return Manifest(media_type, data, digest)

    async def resolve(self, repo: str, reference: str) -> str:
        """The digest of the manifest that ``reference`` (tag or digest) names."""
        response = await self._send(
            "HEAD", f"/v2/{repo}/manifests/{reference}", repo, headers={"Accept": _MANIFEST_ACCEPT}
        )
        if response.status_code == 200 and response.headers.get("Docker-Content-Digest"):
            return str(response.headers["Docker-Content-Digest"])
        if response.status_code not in (200, 405):
            raise self._fail(response, f"manifest {repo}:{reference}")
        return (await self.pull_manifest(repo, reference)).digest

    async def tags(self, repo: str) -> list[str]:
        response = await self._send("GET", f"/v2/{repo}/tags/list", repo)
        if response.status_code != 200:
            raise self._fail(response, f"tags of {repo}")
        body: dict[str, Any] = response.json()
        return sorted(body.get("tags") or [])


def _basic(credentials: Credentials) -> str:
    token = base64.b64encode(f"{credentials.username}:{credentials.password}".encode()).decode()
    return f"Basic {token}"
