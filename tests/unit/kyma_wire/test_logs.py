"""Log lines as text or JSON objects: the keys log pipelines index, extras, exceptions, one handler."""

from __future__ import annotations

import io
import json
import logging
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
