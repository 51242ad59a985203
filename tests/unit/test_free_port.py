"""``tests.controlplane.process.free_port``: ports outside the ephemeral range, free, never twice.

Every server a test starts gets its port here; one taken between the pick and the server's bind made
a sharded replica exit in a fresh-clone run (see the function's docstring).
"""

from __future__ import annotations

import socket

from tests.controlplane.process import _bindable, _ephemeral_range, free_port


def test_ports_lie_below_the_ephemeral_range_are_free_and_never_repeat() -> None:
    low, high = _ephemeral_range()
    assert 0 < low <= high
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    for port in ports:
        assert port < low  # outgoing connections never take these
        assert _bindable(port)


def test_a_port_someone_listens_on_is_not_bindable() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        assert not _bindable(taken.getsockname()[1])
