"""The HTTP client that posts signed requests to KCP.

Why its own client: httpx with httpcore and anyio took ~3.4 MB of the agent's resident memory on
every customer node (issue 18), for one fixed origin without cookies, redirects or proxies. The
requests go through ``kyma_wire.http_client.HttpClient`` (asyncio streams, httptools' response
parser; shared with the listener's hand-off): mTLS with the agent's ``ssl.SSLContext`` (KCP's CA
bundle, the client certificate and key), keep-alive, at most ``max_connections`` connections, one
deadline per request. A request that meets a connection KCP closed while idle is signed anew (fresh
nonce) and sent once more on a new connection; every other failure goes back to ``Delivery``, which
retries with backoff. When the certificates or the signing key rotate, ``replace`` swaps in a new
client and signer; requests already in flight finish on the old one, which is closed when its last
request returns. Queued events are unaffected. Tests inject a transport with the same interface
(``kyma_wire.httpx_transport.HttpxTransport`` over ``httpx.MockTransport`` or ``httpx.ASGITransport``)
instead of sockets.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from kyma_wire.http_client import HeaderSource, HttpClient, HttpResponse, HttpTransport

_CONTENT_TYPE = "application/json"
_HEADERS = {"content-type": _CONTENT_TYPE, "user-agent": "skr-watcher"}
_IDLE_SECONDS = 50.0
"""Idle keep-alive connections are dropped after this (below common gateway/LB idle timeouts of 60 s)."""


class Signer(Protocol):
    """``skr_watcher.signer.FastEventSigner``."""

    key_id: str

    def headers(self, method: str, url: str, content_type: str, body: bytes) -> dict[str, str]: ...


@dataclass(eq=False)
class _Slot:
    transport: HttpTransport
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
        transport: HttpTransport | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._max_connections = max_connections
        self._timeout = timeout
        self._server_hostname = server_hostname
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
        client = HttpClient(
            max_connections=self._max_connections,
            timeout=self._timeout,
            connect_timeout=self._timeout,
            idle_seconds=_IDLE_SECONDS,
            ssl_context=ssl_context,
            server_hostname=self._server_hostname,
        )
        return _Slot(client, signer)

    async def replace(self, ssl_context: ssl.SSLContext | None, signer: Signer | None) -> None:
        """Use new credentials for every request from now on."""
        old, self._slot = self._slot, self._new_slot(ssl_context, signer)
        old.retired = True
        self._closing.add(old)
        if old.in_flight == 0:
            await self._close(old)

    async def post(self, path: str, body: bytes) -> HttpResponse:
        """POST ``body`` as JSON to ``path`` (signed when a signer is configured).

        Raises ``kyma_wire.http_client.HttpTransportError`` when no answer arrives.
        """
        slot = self._slot
        url = self._base_url + path
        signer = slot.signer

        def headers() -> dict[str, str]:
            if signer is None:
                return _HEADERS
            return {**_HEADERS, **signer.headers("POST", url, _CONTENT_TYPE, body)}

        slot.in_flight += 1
        try:
            return await slot.transport.post(url, body, headers(), refresh=headers)
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


class _Shared:
    """An injected transport, used by every credential set and closed by its owner, not by us."""

    def __init__(self, transport: HttpTransport) -> None:
        self._transport = transport

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, refresh: HeaderSource | None = None
    ) -> HttpResponse:
        return await self._transport.post(url, body, headers, refresh=refresh)

    async def aclose(self) -> None:
        pass
