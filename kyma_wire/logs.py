"""Log output shared by the operator, the listener and the agent: text lines or JSON lines.

Why: in a cluster, log pipelines (Loki, Elasticsearch, Cloud Logging) take one JSON object per line
and index its keys, with no per-component parsing rules; upstream lifecycle-manager logs JSON
through zap. ``--log-format json`` (operator, standalone listener) and ``LOG_FORMAT=json`` (agent)
switch every line of the process, including the libraries' (uvicorn, httpx), to that form; the
default stays the human-readable text line that ``make run`` shows.

A JSON line uses zap's key names: ``ts`` (ISO 8601, UTC, milliseconds), ``level`` (``debug``,
``info``, ``warn``, ``error``, ``critical``), ``logger``, ``msg``; ``error`` holds a formatted
exception, and whatever a call site passes as ``extra={...}`` becomes further keys (values JSON
can't represent are written as ``str()``). The formatter is a few lines of the standard library (no
python-json-logger): the agent imports this module and keeps its import and memory budget.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Iterable
from typing import Any, Literal, TextIO, get_args

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[str, ...] = get_args(LogFormat)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_LEVELS = {"WARNING": "warn"}
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        entry: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": _LEVELS.get(record.levelname, record.levelname.lower()),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stacktrace"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def formatter(log_format: LogFormat) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")


def configure(
    level: str | int, stream: TextIO, log_format: LogFormat = "text", *, quiet: Iterable[str] = ()
) -> None:
    """One stream handler on the root logger, in ``log_format``, at ``level``.

    Existing root handlers are replaced (a second ``configure`` does not double every line).
    ``quiet``: loggers held at WARNING at least whatever ``level`` is; their own handlers are removed
    so that they too write through the root handler, in the same format.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(log_format))
    root.addHandler(handler)
    root.setLevel(level)
    numeric = level if isinstance(level, int) else logging.getLevelName(level)
    threshold = max(logging.WARNING, numeric)
    for name in quiet:
        library = logging.getLogger(name)
        library.setLevel(threshold)
        library.propagate = True
        for own in list(library.handlers):
            library.removeHandler(own)
