"""A child process of the local control plane: started detached, dies with its parent, logs to a file.

Why its own module: the API servers (``cluster.py``) and the living cluster's components
(``living.py``) are started, checked and stopped the same way.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class ControlPlaneError(RuntimeError):
    """A component did not start or become ready; the message includes its log tail."""


_LOWEST_PORT = 10_000
"""Ports handed out lie between this and the start of the kernel's ephemeral range."""
_handed_out: set[int] = set()
_pick = random.SystemRandom()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port on 127.0.0.1 that nobody has bound, for a server a test starts a moment later.

    Why not just the kernel's ``bind(port 0)``: that port comes from the ephemeral range, which every
    outgoing connection on the machine draws its local port from too. Between this check and the
    server's own bind (seconds when a Python process starts on a loaded machine) a client connection
    can take it, and the server exits with EADDRINUSE (a sharded replica that never joined, in a
    fresh-clone run next to benchmarks opening thousands of connections). A port below the ephemeral
    range is only ever taken by an explicit bind: picked at random there, checked bindable, and never
    handed out twice by this process. Falls back to ``bind(0)`` if that range is too small.
    """
    low, _high = _ephemeral_range()
    if low - _LOWEST_PORT >= 1_000:
        for _ in range(200):
            port = _pick.randrange(_LOWEST_PORT, low)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        found: int = sock.getsockname()[1]
        return found


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Process:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    env: dict[str, str] | None = None
    """Extra environment variables on top of this process's."""

    def start(self) -> None:
        log = self.log_path.open("wb")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if self.env is None else {**os.environ, **self.env},
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.popen.returncode}; log tail:\n{self.log_tail()}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
            os.killpg(self.popen.pid, signal.SIGCONT)  # a paused process acts on the SIGTERM too
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the running process (e.g. SIGSTOP/SIGCONT: a node whose kubelet hangs)."""
        if self.popen is None or self.popen.poll() is not None:
            raise ControlPlaneError(f"{self.name} is not running")
        self.popen.send_signal(sig)

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid
