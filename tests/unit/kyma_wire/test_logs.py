"""Log lines as text or JSON objects: the keys log pipelines index, extras, exceptions, one handler."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from kyma_wire import logs


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """The root logger, restored afterwards (``configure`` replaces its handlers)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()  # a batching handler's flusher thread ends
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_json_line_has_zaps_keys_and_the_extras(logger: logging.Logger) -> None:
    out = io.StringIO()
    logs.configure("INFO", out, "json")
    logging.getLogger("kyma_operator.kyma").info(
        "reconciled %s", "kcp-system/rt-1", extra={"kyma": "rt-1", "duration_ms": 12.5}
    )
    logging.getLogger("kcp_listener").warning("slow")
    logging.getLogger("x").debug("below the level")
    first, second = _lines(out)
    assert set(first) == {"ts", "level", "logger", "msg", "kyma", "duration_ms"}
    assert (first["level"], first["logger"], first["msg"]) == (
        "info",
        "kyma_operator.kyma",
        "reconciled kcp-system/rt-1",
    )
    assert (first["kyma"], first["duration_ms"]) == ("rt-1", 12.5)
    assert str(first["ts"]).endswith("Z") and str(first["ts"])[10] == "T"
    assert second["level"] == "warn"


def test_an_exception_is_one_line_with_its_traceback_under_error(logger: logging.Logger) -> None:
    out = io.StringIO()
    logs.configure("INFO", out, "json")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("kyma_operator").exception("reconcile failed", extra={"obj": object()})
    assert out.getvalue().count("\n") == 1
    (line,) = _lines(out)
    assert line["msg"] == "reconcile failed" and line["level"] == "error"
    assert "Traceback" in str(line["error"]) and "RuntimeError: boom" in str(line["error"])
    assert str(line["obj"]).startswith("<object object")  # not JSON: written as str()


def test_text_is_the_default_and_configure_replaces_the_handler(logger: logging.Logger) -> None:
    first, second = io.StringIO(), io.StringIO()
    logs.configure("INFO", first, "json")
    logs.configure("INFO", second)
    logging.getLogger("kcp_listener").info("hello")
    assert first.getvalue() == ""
    assert second.getvalue().rstrip().endswith(" INFO kcp_listener: hello")


def test_quiet_libraries_stay_at_warning_and_write_through_the_root_handler(logger: logging.Logger) -> None:
    library = logging.getLogger("some.library")
    own = io.StringIO()
    library.addHandler(logging.StreamHandler(own))
    library.propagate = False
    out = io.StringIO()
    try:
        logs.configure("DEBUG", out, "json", quiet=["some.library"])
        library.info("per request")
        library.warning("real")
        assert [line["msg"] for line in _lines(out)] == ["real"]
        assert own.getvalue() == ""
    finally:
        library.setLevel(logging.NOTSET)


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        logs.formatter("xml")  # type: ignore[arg-type]


class Writes(io.StringIO):
    """A stream that records each write, as a pipe would see it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def _flushers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "log-flush"]


def test_lines_below_warning_are_written_together_a_warning_at_once_with_them(logger: logging.Logger) -> None:
    out = Writes()
    logs.configure("INFO", out, batch_interval=30.0)  # longer than the test: only the rules below write
    log = logging.getLogger("kyma_operator.kyma")
    log.info("one")
    log.info("two")
    assert out.writes == []
    log.warning("three")
    assert len(out.writes) == 1
    assert [line.split(": ", 1)[1] for line in out.writes[0].splitlines()] == ["one", "two", "three"]
    log.info("four")
    logging.getLogger().handlers[0].flush()  # what logging.shutdown does at exit
    assert len(out.writes) == 2 and out.writes[1].endswith("kyma_operator.kyma: four\n")


def test_a_batch_is_written_once_its_interval_has_passed_or_it_is_full(logger: logging.Logger) -> None:
    out = Writes()
    logs.configure("INFO", out, "json", batch_interval=0.05)
    log = logging.getLogger("kyma_operator.kyma")
    for i in range(3):
        log.info("line %d", i)
    deadline = time.monotonic() + 10
    while not out.writes and time.monotonic() < deadline:
        threading.Event().wait(0.01)  # polling for the flusher thread's write, with a deadline
    assert [json.loads(line)["msg"] for line in out.writes[0].splitlines()] == ["line 0", "line 1", "line 2"]

    full = Writes()
    handler = logs.BatchingStreamHandler(full, 30.0, max_bytes=1000)
    handler.setFormatter(logging.Formatter("%(message)s"))
    try:
        for _ in range(9):
            handler.handle(logging.LogRecord("x", logging.INFO, "", 0, "a" * 99, None, None))
        assert full.writes == []
        handler.handle(logging.LogRecord("x", logging.INFO, "", 0, "a" * 99, None, None))
        assert len(full.writes) == 1 and full.getvalue() == ("a" * 99 + "\n") * 10  # 1,000 bytes
    finally:
        handler.close()


def test_configure_again_ends_the_flusher_and_writes_what_was_waiting(logger: logging.Logger) -> None:
    before = set(_flushers())
    first = Writes()
    logs.configure("INFO", first, batch_interval=30.0)
    (flusher,) = set(_flushers()) - before
    logging.getLogger("x").info("waiting")
    logs.configure("INFO", io.StringIO())  # replaces (and closes) the batching handler
    assert first.getvalue().endswith("x: waiting\n")
    flusher.join(timeout=10)
    assert not flusher.is_alive()
    with pytest.raises(ValueError, match="positive"):
        logs.BatchingStreamHandler(io.StringIO(), 0)
