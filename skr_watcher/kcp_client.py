"""The HTTP client that posts signed requests to KCP.

One ``httpx`` connection pool (``AsyncHTTPTransport``) per credential set, small (httpx degrades
sharply beyond a handful of concurrent connections, see python-ecosystem notes). Requests go to the
transport directly, not through ``httpx.AsyncClient``: the client's per-request machinery (cookie
jar round trips through ``urllib``, auth and redirect flows, event hooks, header merging) costs
about a third of a request's CPU and the agent uses none of it (one fixed origin, no cookies, no
redirects, no proxies: it talks to the KCP gateway it was configured with). When the certificates or
the signing key rotate, ``replace`` swaps in a new pool and signer; requests already in flight finish
on the old pool, which is closed when its last request returns. Queued events are unaffected. Tests
inject an ``httpx`` transport (``httpx.MockTransport``, ``httpx.ASGITransport``) instead of sockets.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Protocol

import httpx

_HEADERS = (("content-type", "application/json"), ("user-agent", "skr-watcher"))


class Signer(Protocol):
    """``skr_watcher.signer.FastEventSigner`` (or the reference signer in tests)."""

    key_id: str

    def sign(self, request: httpx.Request) -> None: ...


@dataclass(eq=False)
class _Slot:
    transport: httpx.AsyncBaseTransport
    signer: Signer | None
    in_flight: int = 0
    retired: bool = False


class KcpClient:
    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        signer: Signer | None,
        max_connections: int = 4,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._max_connections = max_connections
        self._timeout = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        self._transport = transport
        self._slot = self._new_slot(ssl_context, signer)
        self._closing: set[_Slot] = set()

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def key_id(self) -> str | None:
        return self._slot.signer.key_id if self._slot.signer else None

    def _new_slot(self, ssl_context: ssl.SSLContext | None, signer: Signer | None) -> _Slot:
        if self._transport is not None:
            return _Slot(_Shared(self._transport), signer)
        limits = httpx.Limits(
            max_connections=self._max_connections, max_keepalive_connections=self._max_connections
        )
        transport = httpx.AsyncHTTPTransport(
            verify=ssl_context if ssl_context is not None else True, limits=limits
        )
        return _Slot(transport, signer)

    async def replace(self, ssl_context: ssl.SSLContext | None, signer: Signer | None) -> None:
        """Use new credentials for every request from now on."""
        old, self._slot = self._slot, self._new_slot(ssl_context, signer)
        old.retired = True
        self._closing.add(old)
        if old.in_flight == 0:
            await self._close(old)

    async def post(self, path: str, body: bytes) -> httpx.Response:
        """POST ``body`` as JSON to ``path`` (signed when a signer is configured)."""
        slot = self._slot
        request = httpx.Request(
            "POST",
            self._base_url + path,
            content=body,
            headers=_HEADERS,
            extensions={"timeout": self._timeout},
        )
        if slot.signer is not None:
            slot.signer.sign(request)
        slot.in_flight += 1
        try:
            response = await slot.transport.handle_async_request(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
            return response
        finally:
            slot.in_flight -= 1
            if slot.retired and slot.in_flight == 0:
                await self._close(slot)

    async def _close(self, slot: _Slot) -> None:
        if slot in self._closing:
            self._closing.discard(slot)
            await slot.transport.aclose()

    async def aclose(self) -> None:
        for slot in list(self._closing):
            await self._close(slot)
        await self._slot.transport.aclose()


class _Shared(httpx.AsyncBaseTransport):
    """An injected transport, used by every credential set and closed by its owner, not by us."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._transport.handle_async_request(request)
