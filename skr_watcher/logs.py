"""The agent's log output: one handler, one line per thing that happened, no per-request noise.

Why a module: the agent runs two embedded uvicorn servers (admissions and metrics) in one process,
and uvicorn logs its lifecycle ("Started server process", "Shutting down", ...) per server on the
shared ``uvicorn.error`` logger, so every such line appeared twice in ``make run`` output. httpx
logs one INFO line per POST to KCP (``HTTP Request: POST ... "HTTP/1.1 200 OK"``): at 500 events/s
that is 500 lines a second of CPU spent formatting what the metrics already count. The agent logs
its own start and stop lines (with both addresses) instead; the libraries keep WARNING and above.
"""

from __future__ import annotations

import logging
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET_LIBRARIES = ("uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpcore")
"""Loggers held at WARNING whatever the agent's level (their INFO lines repeat per server/request)."""


def configure(level: str, stream: TextIO) -> None:
    """One stream handler on the root logger at ``level``; the libraries above at WARNING at least.

    The libraries' own handlers are removed (uvicorn's default configuration would give its loggers
    a second handler: every line twice), so everything goes through the root handler once.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    threshold = max(logging.WARNING, logging.getLevelName(level))
    for name in QUIET_LIBRARIES:  # through the one root handler, whatever configured them before
        library = logging.getLogger(name)
        library.setLevel(threshold)
        library.propagate = True
        for handler in list(library.handlers):
            library.removeHandler(handler)
