"""A listening socket bound before a server starts: shared by the agent's own HTTP server and the
uvicorn-based ``embedded_server``.

Why here: both need the same small thing (bind ``port=0`` and learn the port, an error that names
the address), and the agent must not import ``embedded_server`` (it would load uvicorn). ``kyma_wire``
is the lean package every process imports anyway.
"""

from __future__ import annotations

import socket

__all__ = ["bind"]


def bind(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening, non-blocking TCP socket on ``host:port`` (IPv6 if ``host`` has a colon).

    Bound here, not by the event loop: ``port=0`` works and the error names the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise OSError(error.errno, f"cannot bind {host}:{port}: {error.strerror}") from None
    sock.listen(backlog)
    sock.setblocking(False)
    return sock
