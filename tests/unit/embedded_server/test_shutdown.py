"""A stop that outlasts uvicorn's graceful timeout closes the connections uvicorn leaves open.

uvicorn returns from its shutdown with a request still in flight and that connection's transport
open; the socket then lived until the garbage collector found it and warned "unclosed transport"
in whatever test ran at that moment. Real uvicorn, real sockets on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

from embedded_server import EmbeddedServer


def _app(entered: asyncio.Event, release: asyncio.Event) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        entered.set()
        try:
            await asyncio.Event().wait()  # a request that never answers...
        except asyncio.CancelledError:
            await release.wait()  # ...and outlives uvicorn's cancel at its graceful timeout

    return app


async def test_a_request_in_flight_at_stop_has_its_connection_closed() -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    app = _app(entered, release)
    server = EmbeddedServer(app, host="127.0.0.1", port=0, name="stuck", graceful_seconds=0.5)
    await server.start()
    assert server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(entered.wait(), 10)
        await server.stop()
        # the server's side is gone: the client reads EOF (or a reset) instead of waiting forever
        try:
            data = await asyncio.wait_for(reader.read(), 10)
        except ConnectionResetError:
            data = b""
        assert b"200" not in data
    finally:
        release.set()
        writer.close()
        await asyncio.gather(writer.wait_closed(), return_exceptions=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    # this server's sockets and transports only: what other tests left is theirs
    leaks = [str(w.message) for w in caught if _on_port(w, server.port)]
    assert not leaks, leaks


def _on_port(caught: warnings.WarningMessage, port: int) -> bool:
    """A ResourceWarning about a socket (its message names both ends) or a transport (its source
    knows both ends) with ``port`` at one end."""
    if not issubclass(caught.category, ResourceWarning):
        return False
    if f", {port})" in str(caught.message):
        return True
    info = getattr(caught.source, "get_extra_info", None)
    ends = (info("sockname"), info("peername")) if callable(info) else ()
    return any(isinstance(end, tuple) and end[1] == port for end in ends)
