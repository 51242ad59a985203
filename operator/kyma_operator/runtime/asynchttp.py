"""``KubeClient``'s httpx transport on the event loop: watches, and clusters behind a proxy.

(Requests and lists to every other cluster go through ``lighthttp.LightHttp``, which builds this
transport on first use and shares its ``Retry-After`` rule, ``retrying``.)

Why this exists: the operator holds one KCP client and a client per runtime (two: Kyma and
Manifest controller), 5,000 runtimes and more. Blocking clients need a thread per request in
flight and per watch; at that scale that means tens of thousands of threads, and a shared pool
would let slow or unreachable runtimes (15 s timeouts) stall every other one. On the event loop a
waiting request costs a socket and a coroutine, nothing shared, so this transport gives each
client:

* no thread at all (requests and watches are coroutines);
* a bounded connection pool (``max_connections``; further requests wait for a free connection);
  watches have their own unbounded pool (each holds its connection for minutes);
* kept-alive connections reused for ``keepalive_expiry`` seconds (an older one is closed at the
  next request; a runtime that is not used at all is let go by the client cache's idle TTL, which
  closes the whole client: ``remote.cache``);
* retries: a connection that failed before the request was sent is retried (any method), and a
  429/503 answer with ``Retry-After`` (an API server whose cache of a just-created CRD is still
  initialising says so) is retried after that delay, twice at most, for every method but POST and
  PATCH;
* TLS, SNI name and proxy from the kubeconfig (``runtime.kubeconfig.ClusterAccess``); a connection
  whose TLS handshake is cancelled is closed (``runtime.tlscancel``).

httpx is the project's HTTP client already (tests, registry, hand-off rigs); why it and not a
Kubernetes client library: ``docs/kube-client.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Protocol

import httpx

from kyma_operator.runtime.errors import KubeTransportError, error_from_status
from kyma_operator.runtime.kubeconfig import ClusterAccess
from kyma_operator.runtime.tlscancel import cancel_safe

# httpx logs every request at INFO; through this transport that is every API call of the operator
# (thousands a minute at scale). Request counts are metrics (``KubeClient(on_request=...)``).
logging.getLogger("httpx").setLevel(logging.WARNING)

NOT_RETRIED = frozenset({"POST", "PATCH"})
"""Methods never sent twice: the server may have acted on the first."""
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


def _retry_delay(status: int, retry_after: str | None) -> float | None:
    """Seconds to wait before sending again, for a 429/503 answer with a usable ``Retry-After``."""
    if status not in _RETRY_AFTER_STATUS:
        return None
    return _delay(retry_after)


Answer = tuple[int, bytes, str | None]
"""(status, body, Retry-After) of one request."""


async def retrying(
    method: str, send: Callable[[], Awaitable[Answer]], sleep: Callable[[float], Awaitable[None]]
) -> Answer:
    """``send()``'s answer, sent again after a 429/503 answer's ``Retry-After`` delay (twice at
    most, never for POST and PATCH). Shared by both transports (``lighthttp``)."""
    attempts = 0 if method in NOT_RETRIED else _RETRY_AFTER_ATTEMPTS
    while True:
        answer = await send()
        delay = _retry_delay(answer[0], answer[2])
        if delay is None or attempts == 0:
            return answer
        attempts -= 1
        await sleep(delay)


def _translate(exc: httpx.HTTPError, what: str) -> KubeTransportError:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError | ssl.CertificateError):
            return KubeTransportError(f"{what}: TLS error: {cause}", tls=True)
        cause = cause.__cause__ or cause.__context__
    return KubeTransportError(f"{what}: {type(exc).__name__}: {exc}")


class HttpTransport(Protocol):
    """What ``KubeClient`` sends through: ``lighthttp.LightHttp`` (which hands lists and watches to
    ``AsyncHttp``) or ``AsyncHttp`` itself."""

    async def request(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], what: str
    ) -> Answer: ...

    def get_streamed(self, url: str, headers: dict[str, str], what: str) -> AsyncGenerator[bytes, None]: ...

    def stream(
        self, url: str, headers: dict[str, str], read_timeout: float | None, what: str
    ) -> AsyncGenerator[bytes, None]: ...

    async def close(self) -> None: ...


class AsyncHttp:
    """Requests and streams to one API server; ``close()`` releases every connection."""

    def __init__(
        self,
        access: ClusterAccess,
        *,
        max_connections: int,
        request_timeout: float,
        keepalive_expiry: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``sleep``: how a ``Retry-After`` delay is waited for."""
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._ssl = access.ssl_context
        self._proxy = access.proxy
        self._extensions: dict[str, Any] = (
            {"sni_hostname": access.tls_server_name} if access.tls_server_name else {}
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
        transport = cancel_safe(
            httpx.AsyncHTTPTransport(
                verify=self._ssl, limits=limits, proxy=self._proxy, trust_env=False, retries=2
            )
        )
        # identity: no compressed responses (loopback and LAN: CPU, no gain)
        return httpx.AsyncClient(
            transport=transport, timeout=timeout, trust_env=False, headers={"Accept-Encoding": "identity"}
        )

    async def request(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], what: str
    ) -> tuple[int, bytes, str | None]:
        """(status, body, Retry-After) of one request; transport failures as ``KubeTransportError``.

        Retried as the module docstring says (never a POST or PATCH that reached the server)."""

        async def once() -> Answer:
            try:
                response = await self._client.request(
                    method, url, content=body, headers=headers, extensions=self._extensions
                )
            except httpx.HTTPError as exc:
                raise _translate(exc, what) from exc
            return response.status_code, response.content, response.headers.get("Retry-After")

        return await retrying(method, once, self._sleep)

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
        async with contextlib.aclosing(
            self._stream(self._watch_client, url, headers, what, timeout, 0)
        ) as body:
            async for chunk in body:
                yield chunk

    async def get_streamed(self, url: str, headers: dict[str, str], what: str) -> AsyncGenerator[bytes, None]:
        """The body of an ordinary GET (a list) chunk by chunk as it arrives, over the request pool
        and its timeouts; a non-200 answer raises its typed error, ``Retry-After`` is honoured as
        in ``request``."""
        async with contextlib.aclosing(
            self._stream(self._client, url, headers, what, None, _RETRY_AFTER_ATTEMPTS)
        ) as body:
            async for chunk in body:
                yield chunk

    async def _stream(
        self,
        client: httpx.AsyncClient,
        url: str,
        headers: dict[str, str],
        what: str,
        timeouts: httpx.Timeout | None,
        attempts: int,
    ) -> AsyncGenerator[bytes, None]:
        while True:
            try:
                request = client.build_request(
                    "GET",
                    url,
                    headers=headers,
                    extensions=self._extensions,
                    timeout=httpx.USE_CLIENT_DEFAULT if timeouts is None else timeouts,
                )
                response = await client.send(request, stream=True)
                try:
                    if response.status_code == 200:
                        async for chunk in response.aiter_bytes():
                            yield chunk
                        return
                    data = await response.aread()
                finally:
                    await response.aclose()
            except httpx.HTTPError as exc:
                raise _translate(exc, what) from exc
            delay = _retry_delay(response.status_code, response.headers.get("Retry-After"))
            if delay is None or attempts == 0:
                raise error_from_status(response.status_code, data, response.headers.get("Retry-After"))
            attempts -= 1
            await self._sleep(delay)

    async def close(self) -> None:
        await self._client.aclose()
        if self._watch_client is not None:
            await self._watch_client.aclose()
