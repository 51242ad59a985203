"""Open TCP connections and threads of a process, from /proc (Linux), for tests and benchmarks.

Why: the cost of a runtime client is counted in sockets and threads; tests assert that a pool stays
within its bound and that an idle client lets its connections go, and the scale benchmark reports
both per runtime. psutil is not a dependency; /proc has everything needed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_ESTABLISHED = "01"


@dataclass(frozen=True)
class Connection:
    local_port: int
    remote_port: int


def _socket_inodes(pid: int) -> set[str]:
    inodes: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def established(pid: int | None = None, remote_port: int | None = None) -> list[Connection]:
    """The established TCP connections of ``pid`` (default: this process), optionally to one port."""
    pid = os.getpid() if pid is None else pid
    inodes = _socket_inodes(pid)
    found: list[Connection] = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state != _ESTABLISHED or inode not in inodes:
                continue
            connection = Connection(int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
            if remote_port is None or connection.remote_port == remote_port:
                found.append(connection)
    return found


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def socket_count(pid: int) -> int:
    """Sockets of every kind (TCP, Unix) the process holds open."""
    return len(_socket_inodes(pid))


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))
