"""Slow clients cut by a server's timeouts, without waiting for the timeouts in real time.

Why: a slowloris test that trickles bytes until the server's header timeout cuts it waits that
timeout for real, and how many bytes get through meanwhile depends on how busy the machine is.
Our servers (``kyma_wire.http_server``) run their deadlines on the event loop's clock, so a test
can run on a loop whose clock it moves forward itself (``SteppedLoop``). The sockets stay real and
the server applies its own deadlines. The test moves the clock only once the server is receiving
the request (or holds the connection), so a request is not cut before it started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.hostile import attacks
from tests.hostile.attacks import Target

_DEADLINE = 10.0


class SteppedLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock the test moves forward (``advance``): the servers' deadlines, which
    run on the loop's clock, come due without waiting, over real sockets. Run a test on it with
    ``asyncio.Runner(loop_factory=SteppedLoop)``."""

    offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


async def cut_after_the_timeout(
    ready: Callable[[], bool],
    target: Target,
    request: bytes,
    *,
    trickle: bool,
    steps: int = 5,
    step: float = 0.25,
) -> bytes:
    """Send ``request`` (a head or a body that never ends, a whole request, or nothing), poll until
    ``ready()`` (the server has what its timeout is about: it is receiving the request, or holds
    the connection idle), then move the clock ``steps`` times by ``step`` (a byte sent before each
    with ``trickle``). Returns what the server answered before it closed; fails if it did not
    close."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SteppedLoop), "run the test with asyncio.Runner(loop_factory=SteppedLoop)"
    reader, writer = await attacks.connect(target)
    try:
        writer.write(request)
        deadline = loop.time() + _DEADLINE
        while not ready():
            assert loop.time() < deadline, "the server never got ready for its timeout"
            await asyncio.sleep(0.01)
        for _ in range(steps):
            if trickle:
                try:
                    writer.write(b"s")
                    await writer.drain()
                except ConnectionError:
                    break  # cut already: its answer waits in the reader (``attacks.connect``)
            loop.advance(step)
            await asyncio.sleep(0)
        outcome = await attacks.read_until_closed(reader)
        assert outcome.closed, "not cut"
        return outcome.answer
    finally:
        writer.close()
