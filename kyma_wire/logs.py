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
import threading
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


class BatchingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes what was logged within ``interval`` seconds in one write.

    Why: the operator logs one line per reconcile, and a line-buffered stream makes each line a
    write to the pipe the container runtime (or a benchmark, or a test) reads: a wake-up of the
    reader per line. On a busy node the woken reader preempts the operator in the middle of its
    next reconcile; with three replicas on two cores, a profile of a full resync put 16 % of a
    replica's samples in ``StreamHandler.emit``, against 3 % for one replica with a core to spare
    (``benchmarks/results/scale.md``). Batched, the reader wakes at most ``1 / interval`` times a
    second. A record at WARNING or above is written at once, with everything before it, and so is a
    batch of ``max_bytes``; ``flush()`` (called at exit by ``logging.shutdown``) writes what is
    pending. What a process killed outright had not yet written (at most ``interval`` seconds of
    INFO lines) is lost.
    """

    def __init__(self, stream: TextIO, interval: float, *, max_bytes: int = 64 * 1024) -> None:
        super().__init__(stream)
        if interval <= 0:
            raise ValueError("the batching interval must be positive")
        self.interval = interval
        self.max_bytes = max_bytes
        self._pending: list[str] = []
        self._size = 0
        self._due = threading.Event()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_when_due, name="log-flush", daemon=True)
        self._flusher.start()

    def emit(self, record: logging.LogRecord) -> None:
        """Called with the handler's lock held (``Handler.handle``)."""
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._pending.append(line)
        self._size += len(line)
        if record.levelno >= logging.WARNING or self._size >= self.max_bytes or self._stop.is_set():
            self._write_pending()
        elif len(self._pending) == 1:
            self._due.set()

    def flush(self) -> None:
        self.acquire()
        try:
            self._write_pending()
        finally:
            self.release()

    def close(self) -> None:
        self._stop.set()
        self._due.set()
        self.flush()
        super().close()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        self._size = 0
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:  # what logging does for a failed write: report it on stderr, go on
            self.handleError(logging.LogRecord("", logging.ERROR, "", 0, "log write failed", None, None))

    def _flush_when_due(self) -> None:
        while not self._stop.is_set():
            self._due.wait()
            self._due.clear()
            self._stop.wait(self.interval)  # the batch's time to fill; cut short by close()
            self.flush()


def configure(
    level: str | int,
    stream: TextIO,
    log_format: LogFormat = "text",
    *,
    quiet: Iterable[str] = (),
    batch_interval: float | None = None,
) -> None:
    """One stream handler on the root logger, in ``log_format``, at ``level``.

    Existing root handlers are replaced (a second ``configure`` does not double every line).
    ``quiet``: loggers held at WARNING at least whatever ``level`` is; their own handlers are removed
    so that they too write through the root handler, in the same format. ``batch_interval``: lines
    below WARNING are written in batches at most that many seconds old (``BatchingStreamHandler``);
    None: every line at once.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    handler = (
        logging.StreamHandler(stream)
        if batch_interval is None
        else BatchingStreamHandler(stream, batch_interval)
    )
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
