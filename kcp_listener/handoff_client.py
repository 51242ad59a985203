"""The HTTP/1.1 client the listener hands events to other replicas with.

Why not httpx here: measured on the development machine (``benchmarks/results/listener.md``,
section "Hand-off"), one httpx request costs ~650-900 us of CPU, the same exchange over asyncio
streams ~100 us including the server on the other end; with three replicas two thirds of all agent
events are handed off, so the client's cost decides the listener's CPU per event. The client itself
is ``kyma_wire.http_client`` (shared with the agent's KCP client, which must not import this
package): keep-alive connections per holder, at most ``max_connections`` per holder, idle
connections closed after ``idle_seconds`` (below the hand-off server's keep-alive of 60 s), one
deadline per exchange, and a request that failed on a reused connection before any response byte is
sent once more byte for byte (the hand-off server accepts each HMAC nonce once, so it takes effect at
most once either way). ``https://`` addresses use TLS with the system's trust store.

``HttpxHandoffClient`` adapts any httpx transport (tests use ``httpx.ASGITransport`` to run
replicas in one process).
"""

from __future__ import annotations

from typing import Protocol

import httpx

from kyma_wire.http_client import HttpClient, HttpTransportError

__all__ = ["HandoffClient", "HandoffTransportError", "HttpxHandoffClient", "StreamHandoffClient"]

HandoffTransportError = HttpTransportError
"""No usable answer: connection refused or lost, timeout, malformed or oversized response."""


class HandoffClient(Protocol):
    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """``(status, body)`` of one POST; raises :class:`HandoffTransportError`."""
        ...

    async def aclose(self) -> None: ...


class StreamHandoffClient:
    """:class:`HandoffClient` over ``kyma_wire.http_client.HttpClient`` (see the module docstring)."""

    def __init__(
        self,
        *,
        max_connections: int = 8,
        timeout: float = 2.0,
        connect_timeout: float = 1.0,
        idle_seconds: float = 30.0,
    ) -> None:
        self._client = HttpClient(
            max_connections=max_connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            idle_seconds=idle_seconds,
        )

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        response = await self._client.post(url, body, headers)
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._client.aclose()


class HttpxHandoffClient:
    """:class:`HandoffClient` over an httpx transport (in-process ASGI apps in tests)."""

    def __init__(self, transport: httpx.AsyncBaseTransport, *, timeout: float = 2.0) -> None:
        self._transport = transport
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 1.0)).as_dict()

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        request = httpx.Request(
            "POST", url, content=body, headers=headers, extensions={"timeout": self._timeout}
        )
        try:
            response = await self._transport.handle_async_request(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
        except httpx.HTTPError as error:
            raise HandoffTransportError(f"{type(error).__name__}: {error}") from None
        return response.status_code, response.content

    async def aclose(self) -> None:
        await self._transport.aclose()
