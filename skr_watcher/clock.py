"""Time as an injectable dependency.

The send queue, the retry loop, the heartbeat and the certificate reloader all wait or read the time.
Taking an ``AgentClock`` instead of calling ``time``/``asyncio.sleep`` directly lets unit tests drive them
with a fake clock: no real sleeps, deterministic backoff sequences.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Protocol


class AgentClock(Protocol):
    """The agent's time: monotonic seconds for durations, UTC wall time for what leaves the process.

    (The operator's ``kyma_operator.runtime.clock.Clock`` is monotonic only: its ``now()`` is a float.)
    """

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; for durations and deadlines."""
        ...

    def utc_now(self) -> datetime.datetime:
        """Wall-clock time in UTC; for timestamps that leave the process."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def utc_now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
