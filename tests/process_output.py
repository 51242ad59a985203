"""Collect a child process's output line by line without ever stopping to read it.

Why: ``async for line in process.stdout`` (``StreamReader.readline``) raises once a line is longer
than the stream's 64 KiB limit, and the reading task ends. Nobody drains the pipe after that: once
it is full the child blocks in its next write (a log line), and a test that waits for it to stop
waits in vain. Reading in chunks has no such limit.
"""

from __future__ import annotations

import asyncio

CHUNK = 1 << 16


async def collect_lines(stream: asyncio.StreamReader, into: list[str]) -> None:
    """Append each line of ``stream`` (decoded, without its line end) to ``into`` until EOF."""
    pending = b""
    while chunk := await stream.read(CHUNK):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        into.extend(line.decode(errors="replace").rstrip() for line in lines)
    if pending:
        into.append(pending.decode(errors="replace").rstrip())
