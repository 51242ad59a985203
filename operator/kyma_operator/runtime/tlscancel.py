"""A connection whose TLS handshake is cancelled is closed, not left to the garbage collector.

Why: httpcore 1.0.9 (under httpx 0.28) closes the TCP stream when ``start_tls`` fails with an
``Exception``, but a task cancelled during the handshake raises ``CancelledError``, a
``BaseException``: the connection is not in the pool yet, nobody holds it, and its socket stays open
until the garbage collector finds it ("unclosed transport <_SelectorSocketTransport>" at a random
later point; CI failed on it once). The operator cancels requests routinely: informers stop at
shutdown and when a runtime's clients are dropped, and a watch may be connecting at that moment.

How: the pool's network backend is wrapped so that every stream it opens closes itself when its
``start_tls`` ends with anything but success (what httpcore does for an ``Exception``, for every
exception). httpx does not let a transport choose its backend, so the wrapping reaches into the
transport's pool; ``cancel_safe`` checks what it wraps and ``tests/unit/kyma_operator/runtime/
test_tlscancel.py`` holds it to the pinned libraries' behaviour with a real server that never
answers the handshake (it fails if httpx or httpcore change shape or the leak comes back).
"""

# ruff: noqa: ASYNC109  (the ``timeout`` parameters are httpcore's stream and backend interface)

from __future__ import annotations

import ssl
import typing

import anyio
import httpcore
import httpx

__all__ = ["cancel_safe"]


class _Stream(httpcore.AsyncNetworkStream):
    """A TCP stream that closes itself when its TLS handshake does not finish."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            return await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):  # a cancelled task still closes what it opened
                await self._inner.aclose()
            raise

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return _Stream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def cancel_safe(transport: httpx.AsyncHTTPTransport) -> httpx.AsyncHTTPTransport:
    """``transport``, its connections closed when their TLS handshake is cancelled (see the module)."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool) or not isinstance(
        backend, httpcore.AsyncNetworkBackend
    ):
        raise TypeError(
            "httpx.AsyncHTTPTransport no longer keeps an httpcore pool with a network backend: "
            "see kyma_operator.runtime.tlscancel"
        )
    if not isinstance(backend, _Backend):
        pool._network_backend = _Backend(backend)
    return transport
