"""A TCP relay between the agents and the listener that the demo can cut: a real network outage.

Why: ``--demo`` shows that runtime edits made while KCP is unreachable still land once it is back
(the agent's bounded queue, retries with backoff and its resync after an outage). Stopping the
operator's listener would also stop what the demo measures; cutting the path in front of it is what
an outage of the gateway or the network looks like to an agent: connections refused and open ones
reset. The agents are told to send to this relay's port (``listener_port_overwrite``); nothing else
in the operator changes.
"""

from __future__ import annotations

import asyncio
import contextlib


class ListenerRelay:
    """Forwards TCP connections from ``127.0.0.1:port`` to the listener; ``cut``/``restore`` it."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port = port
        self.target_port = target_port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def open(self) -> bool:
        return self._server is not None

    async def restore(self) -> None:
        """Accept connections (again) on the same port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port, reuse_address=True)

    async def cut(self) -> None:
        """Refuse new connections and reset the open ones, as a failed network path would."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.transport.abort()
            return
        pair = {client_writer, upstream_writer}
        self._writers |= pair
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream_writer), self._pipe(upstream_reader, client_writer)
            )
        finally:
            self._writers -= pair
            for writer in pair:
                writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        with contextlib.suppress(OSError):
            if writer.can_write_eof() and not writer.is_closing():
                writer.write_eof()
