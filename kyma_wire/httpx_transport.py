"""``kyma_wire.http_client.HttpTransport`` over an httpx transport: in-process rigs and tests only.

Why: the agent's KCP client and the listener's hand-off run on ``kyma_wire.http_client`` (no httpx in
the agent process), but tests drive them against fakes (``httpx.MockTransport``) or whole apps in
the same process (``httpx.ASGITransport``) without sockets. This adapter maps httpx's errors to the
client's (:class:`HttpTimeoutError`, :class:`HttpTransportError`), so the code under test sees what
it sees in production. Importing it loads httpx: never import it from the agent.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from kyma_wire.http_client import HeaderSource, HttpResponse, HttpTimeoutError, HttpTransportError


class HttpxTransport:
    def __init__(self, transport: httpx.AsyncBaseTransport, *, timeout: float = 10.0) -> None:
        self.transport = transport
        self._timeout = httpx.Timeout(timeout).as_dict()

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, refresh: HeaderSource | None = None
    ) -> HttpResponse:
        request = httpx.Request(
            "POST", url, content=body, headers=dict(headers), extensions={"timeout": self._timeout}
        )
        try:
            response = await self.transport.handle_async_request(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
        except httpx.TimeoutException as error:
            raise HttpTimeoutError(f"{type(error).__name__}: {error}") from None
        except httpx.HTTPError as error:
            raise HttpTransportError(f"{type(error).__name__}: {error}") from None
        joined: dict[str, str] = {}
        for name, value in response.headers.multi_items():
            joined[name] = value if name not in joined else f"{joined[name]}, {value}"
        return HttpResponse(response.status_code, joined, response.content)

    async def aclose(self) -> None:
        await self.transport.aclose()
