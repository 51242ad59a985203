"""The agent logs each thing once: no doubled uvicorn lifecycle lines, no httpx line per POST."""

from __future__ import annotations

import io
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from skr_watcher import logs
from tests.controlplane.cluster import free_port
from tests.unit.skr_watcher.certs import agent_files

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    libraries = {
        name: (logger.level, logger.propagate, list(logger.handlers))
        for name in logs.QUIET_LIBRARIES
        for logger in [logging.getLogger(name)]
    }
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, (old_level, propagate, old_handlers) in libraries.items():
        logger = logging.getLogger(name)
        logger.setLevel(old_level)
        logger.propagate = propagate
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        for handler in old_handlers:
            logger.addHandler(handler)


def only_this_thread() -> None:
    """Keep lines of other threads out of the captured output (on every root handler).

    The root logger is process-wide: a thread an earlier test left winding down (a server, an
    agent) may log while these tests capture; their lines are not what these tests check.
    """
    me = threading.get_ident()
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: record.thread == me)


@pytest.mark.usefixtures("restore_logging")
def test_configure_keeps_one_handler_and_quiets_per_server_and_per_request_lines() -> None:
    # what uvicorn's default configuration does (another server in this process, earlier): a handler
    # of its own and no propagation; the agent's configuration must not print through it too
    uvicorn_logger = logging.getLogger("uvicorn")
    uvicorn_logger.addHandler(logging.StreamHandler(io.StringIO()))
    uvicorn_logger.propagate = False
    out = io.StringIO()
    logs.configure("INFO", out)
    logs.configure("INFO", out)  # configuring twice must not add a second handler
    only_this_thread()
    logging.getLogger("skr_watcher.agent").info("started")
    logging.getLogger("uvicorn.error").info("Started server process [1]")
    logging.getLogger("httpx").info('HTTP Request: POST https://kcp/v2/m/event "HTTP/1.1 200 OK"')
    logging.getLogger("uvicorn.error").warning("a real problem")
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "INFO skr_watcher.agent: started",
        "WARNING uvicorn.error: a real problem",
    ]


@pytest.mark.usefixtures("restore_logging")
def test_debug_level_still_quiets_the_libraries_below_warning() -> None:
    out = io.StringIO()
    logs.configure("DEBUG", out)
    only_this_thread()
    logging.getLogger("httpx").info("per request")
    logging.getLogger("skr_watcher").debug("ours")
    assert out.getvalue().count("\n") == 1 and "ours" in out.getvalue()


def _read_until(proc: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while needle not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                raise AssertionError(f"no {needle!r} in agent output: {seen.decode(errors='replace')}")
            if selector.select(left):
                seen += os.read(proc.stdout.fileno(), 65536)
    return seen


def _run_agent_until_serving(tmp_path: Path, **settings: str) -> tuple[int, str]:
    """Start the real agent with ``settings``, stop it (SIGTERM) once it serves; exit code and output.

    Its KCP is a port this test holds bound but not listening (connections refused at once), not a
    fixed port some other process on the machine may serve.
    """
    kcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    kcp.bind(("127.0.0.1", 0))
    with kcp:
        return _run_agent(tmp_path, KCP_ADDR=f"127.0.0.1:{kcp.getsockname()[1]}", **settings)


def _run_agent(tmp_path: Path, **settings: str) -> tuple[int, str]:
    env = agent_files(tmp_path).env(
        WEBHOOK_PORT=str(free_port()),
        METRICS_PORT=str(free_port()),
        SHUTDOWN_TIMEOUT="0.2",
        RESYNC_ON_START="false",
        **settings,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "skr_watcher"],
        cwd=REPO,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    with proc:
        try:
            output = _read_until(proc, b"admissions on https://", timeout=30)
            proc.send_signal(signal.SIGTERM)
            rest, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, (output + rest).decode()


def test_the_real_agent_prints_every_line_once(tmp_path: Path) -> None:
    returncode, output = _run_agent_until_serving(tmp_path, LOG_LEVEL="INFO")
    assert returncode == 0
    messages = [line.split(" ", 2)[2] for line in output.splitlines() if line.strip()]
    assert messages, "the agent logged nothing"
    assert [m for m, n in Counter(messages).items() if n > 1] == []
    assert not any("Started server process" in m for m in messages)
    assert sum("admissions on https://" in m for m in messages) == 1
    assert messages[-1] == "INFO skr_watcher.agent: stopped"


def test_the_real_agent_logs_json_lines_with_log_format_json(tmp_path: Path) -> None:
    returncode, output = _run_agent_until_serving(tmp_path, LOG_FORMAT="json")
    assert returncode == 0
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert lines, "the agent logged nothing"
    assert all({"ts", "level", "logger", "msg"} <= line.keys() for line in lines)
    assert any("admissions on https://" in line["msg"] for line in lines)
    assert (lines[-1]["level"], lines[-1]["logger"], lines[-1]["msg"]) == (
        "info",
        "skr_watcher.agent",
        "stopped",
    )
