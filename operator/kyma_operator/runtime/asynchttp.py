"""Non-blocking HTTP for ``KubeClient``: httpx on the event loop, for clients of runtime (SKR) API servers.

Why this exists: the default ``KubeClient`` transport runs urllib3 on a thread pool of its own and
one thread per watch. That is right for the operator's single KCP client, but the operator holds a
client per runtime (two: Kyma and Manifest controller), and at 5,000 runtimes a pool per client
means tens of thousands of threads. A shared pool would not do either: blocking calls of slow or
unreachable runtimes (15 s timeouts) would occupy the shared threads and stall every other runtime.
On the event loop a waiting request costs a socket and a coroutine, nothing shared, so this
transport gives each runtime client:

* no thread at all (requests and watches are coroutines);
* a bounded connection pool (``max_connections``; further requests wait for a free connection);
* kept-alive connections reused for ``keepalive_expiry`` seconds (an older one is closed at the
  next request; a runtime that is not used at all is let go by the client cache's idle TTL, which
  closes the whole client: ``remote.cache``);
* the retries of the urllib3 transport: a connection that failed before the request was sent is
  retried (any method), and a 429/503 answer with ``Retry-After`` (an API server whose cache of a
  just-created CRD is still initialising says so) is retried after that delay, twice at most, for
  every method but POST and PATCH;
* TLS from the kubeconfig (CA, client certificate, ``verify_ssl``, ``tls-server-name``) and its
  proxy, like the official client's urllib3 set-up.

The kubeconfig is still read by the official client (``kubernetes.config``), which writes inline
certificates to files; this module only turns that ``Configuration`` into an ``ssl.SSLContext``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import httpx
from kubernetes import client as k8s_client

from kyma_operator.runtime.errors import KubeTransportError, error_from_status


def ssl_context(configuration: k8s_client.Configuration) -> ssl.SSLContext:
    """The TLS settings of a loaded kubeconfig: its CA (else the system's), its client certificate."""
    ca = configuration.ssl_ca_cert
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.cert_file:
        context.load_cert_chain(str(configuration.cert_file), configuration.key_file or None)
    return context


_NOT_RETRIED = frozenset({"POST", "PATCH"})
_RETRY_AFTER_STATUS = frozenset({429, 503})
_RETRY_AFTER_ATTEMPTS = 2
_RETRY_AFTER_MAX = 10.0


def _delay(retry_after: str | None) -> float | None:
    """Seconds of a ``Retry-After: <seconds>`` header (capped), None without a usable one."""
    if retry_after is None:
        return None
    try:
        seconds = float(retry_after)
    except ValueError:
        return None
    return min(max(seconds, 0.0), _RETRY_AFTER_MAX)


def _translate(exc: httpx.HTTPError, what: str) -> KubeTransportError:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError | ssl.CertificateError):
            return KubeTransportError(f"{what}: TLS error: {cause}", tls=True)
        cause = cause.__cause__ or cause.__context__
    return KubeTransportError(f"{what}: {type(exc).__name__}: {exc}")


class AsyncHttp:
    """Requests and streams to one API server; ``close()`` releases every connection."""

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        max_connections: int,
        request_timeout: float,
        keepalive_expiry: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``sleep``: how a ``Retry-After`` delay is waited for."""
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._ssl = ssl_context(configuration)
        self._proxy: str | None = configuration.proxy or None
        self._extensions: dict[str, Any] = (
            {"sni_hostname": configuration.tls_server_name} if configuration.tls_server_name else {}
        )
        self._keepalive_expiry = keepalive_expiry
        self._sleep = sleep
        self._client = self._new_client(
            httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=keepalive_expiry,
            ),
            httpx.Timeout(request_timeout, connect=min(10.0, request_timeout)),
        )
        self._watch_client: httpx.AsyncClient | None = None

    def _new_client(self, limits: httpx.Limits, timeout: httpx.Timeout) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(
            verify=self._ssl, limits=limits, proxy=self._proxy, trust_env=False, retries=2
        )
        # identity: like the official client, no compressed responses (loopback and LAN: CPU, no gain)
        return httpx.AsyncClient(
            transport=transport, timeout=timeout, trust_env=False, headers={"Accept-Encoding": "identity"}
        )

    async def request(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], what: str
    ) -> tuple[int, bytes, str | None]:
        """(status, body, Retry-After) of one request; transport failures as ``KubeTransportError``.

        Retried as the module docstring says (never a POST or PATCH that reached the server)."""
        attempts = 0 if method in _NOT_RETRIED else _RETRY_AFTER_ATTEMPTS
        while True:
            try:
                response = await self._client.request(
                    method, url, content=body, headers=headers, extensions=self._extensions
                )
            except httpx.HTTPError as exc:
                raise _translate(exc, what) from exc
            retry_after = response.headers.get("Retry-After")
            delay = _delay(retry_after) if response.status_code in _RETRY_AFTER_STATUS else None
            if delay is None or attempts == 0:
                return response.status_code, response.content, retry_after
            attempts -= 1
            await self._sleep(delay)

    async def stream(
        self, url: str, headers: dict[str, str], read_timeout: float | None, what: str
    ) -> AsyncGenerator[bytes, None]:
        """The body of a long GET (a watch) chunk by chunk; a non-200 answer raises its typed error.

        Watches get their own unbounded pool: each holds its connection for minutes and must not
        take the slots of ordinary requests.
        """
        if self._watch_client is None:
            self._watch_client = self._new_client(
                httpx.Limits(max_connections=None, keepalive_expiry=self._keepalive_expiry),
                httpx.Timeout(10.0, read=read_timeout),
            )
        timeout = httpx.Timeout(10.0, read=read_timeout)
        try:
            request = self._watch_client.build_request(
                "GET", url, headers=headers, timeout=timeout, extensions=self._extensions
            )
            response = await self._watch_client.send(request, stream=True)
            try:
                if response.status_code != 200:
                    data = await response.aread()
                    raise error_from_status(response.status_code, data, response.headers.get("Retry-After"))
                async for chunk in response.aiter_bytes():
                    yield chunk
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise _translate(exc, what) from exc

    async def close(self) -> None:
        await self._client.aclose()
        if self._watch_client is not None:
            await self._watch_client.aclose()
