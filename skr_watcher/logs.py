"""The agent's log output: one handler, one line per thing that happened, no per-request noise.

Why a module: the agent ran two embedded uvicorn servers (admissions and metrics) in one process,
and uvicorn logs its lifecycle ("Started server process", "Shutting down", ...) per server on the
shared ``uvicorn.error`` logger, so every such line appeared twice in ``make run`` output (the agent
now has its own server, ``kyma_wire.http_server``, which logs nothing per request; the uvicorn
loggers stay quiet for processes that embed the agent next to a uvicorn server). httpx
logs one INFO line per POST to KCP (``HTTP Request: POST ... "HTTP/1.1 200 OK"``): at 500 events/s
that is 500 lines a second of CPU spent formatting what the metrics already count. The agent logs
its own start and stop lines (with both addresses) instead; the libraries keep WARNING and above.
``LOG_FORMAT=json`` writes every line as a JSON object (``kyma_wire.logs``) for log pipelines.
"""

from __future__ import annotations

from typing import TextIO

from kyma_wire import logs as shared
from kyma_wire.logs import LogFormat

FORMAT = shared.TEXT_FORMAT
QUIET_LIBRARIES = ("uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpcore")
"""Loggers held at WARNING whatever the agent's level (their INFO lines repeat per server/request)."""


def configure(level: str, stream: TextIO, log_format: LogFormat = "text") -> None:
    """One stream handler on the root logger at ``level``; the libraries above at WARNING at least.

    The libraries' own handlers are removed (uvicorn's default configuration would give its loggers
    a second handler: every line twice), so everything goes through the root handler once.
    """
    shared.configure(level, stream, log_format, quiet=QUIET_LIBRARIES)
