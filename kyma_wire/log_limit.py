"""At most one log line per reason and interval, with the count of the lines it held back.

Why: whatever a client can trigger per request must not write one log line per request. A
malformed request line, a hand-off request with a bad HMAC or a slow client timed out are cheap to
send, and an attacker who sends thousands of them a second writes the log (disk, log pipeline,
the operator's CPU) and buries every other line. The counts belong in metrics (every rejection is
counted there); the log keeps a sample: the first occurrence of a reason is logged at once, later
ones within ``interval`` seconds are only counted, and the next line of that reason says how many
were held back (``... (41 more since the last line)``).

Here, in ``kyma_wire``, because the agent needs it as much as the listener: its webhook port is
reached by whatever the runtime's network admits, and a malformed AdmissionReview used to write one
WARNING line per request there too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RateLimitedLog"]

MAX_REASONS = 64
"""Reasons remembered; they are fixed strings in code, so this only guards against misuse."""


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 10.0,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval < 0:
            raise ValueError("interval must not be negative")
        self._logger = logger
        self._interval = interval
        self._level = level
        self._clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def held_back(self, reason: str) -> int:
        """Lines of ``reason`` not written since its last line."""
        return self._held.get(reason, 0)

    def log(self, reason: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless ``reason`` was logged less than ``interval`` ago; True if written."""
        now = self._clock()
        last = self._last.get(reason)
        if last is not None and now - last < self._interval:
            self._held[reason] = self._held.get(reason, 0) + 1
            return False
        if last is None and len(self._last) >= MAX_REASONS:
            self._last.clear()
            self._held.clear()
        self._last[reason] = now
        held = self._held.pop(reason, 0)
        if held:
            self._logger.log(self._level, message + " (%d more since the last line)", *args, held)
        else:
            self._logger.log(self._level, message, *args)
        return True
