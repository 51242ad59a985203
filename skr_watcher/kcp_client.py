"""The HTTP client that posts signed requests to KCP.

One ``httpx.AsyncClient`` per credential set, with a small connection pool (httpx degrades sharply
beyond a handful of concurrent connections, see python-ecosystem notes). When the certificates or the
signing key rotate, ``replace`` swaps in a new client and signer; requests already in flight finish on
the old client, which is closed when its last request returns. Queued events are unaffected. Tests
inject an ``httpx`` transport (``httpx.MockTransport``) instead of opening sockets.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Protocol

import httpx

_JSON = "application/json"


class Signer(Protocol):
    """``skr_watcher.signer.FastEventSigner`` (or the reference signer in tests)."""

    key_id: str

    def sign(self, request: httpx.Request) -> None: ...


@dataclass(eq=False)
class _Slot:
    client: httpx.AsyncClient
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
        self._timeout = timeout
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
        limits = httpx.Limits(
            max_connections=self._max_connections, max_keepalive_connections=self._max_connections
        )
        client = httpx.AsyncClient(
            verify=ssl_context if ssl_context is not None else True,
            limits=limits,
            timeout=httpx.Timeout(self._timeout),
            transport=self._transport,
            headers={"user-agent": "skr-watcher"},
        )
        return _Slot(client, signer)

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
        request = slot.client.build_request(
            "POST", self._base_url + path, content=body, headers={"content-type": _JSON}
        )
        if slot.signer is not None:
            slot.signer.sign(request)
        slot.in_flight += 1
        try:
            return await slot.client.send(request)
        finally:
            slot.in_flight -= 1
            if slot.retired and slot.in_flight == 0:
                await self._close(slot)

    async def _close(self, slot: _Slot) -> None:
        if slot in self._closing:
            self._closing.discard(slot)
            await slot.client.aclose()

    async def aclose(self) -> None:
        for slot in list(self._closing):
            await self._close(slot)
        await self._slot.client.aclose()
