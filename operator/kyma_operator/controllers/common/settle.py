"""Re-reads after a runtime event that found nothing to do: the event overtook its write.

The runtime's agent reports a change from a *validating admission* call, before the API server
stores it, so the reconcile the event wakes may still read the old object. A reconcile woken by a
runtime event that finds nothing new therefore looks again after each of the controller's
``event_settle_delays``, stopping as soon as one look finds something. The schedule lives in the
object's memory (``Settle``, one per object), not in the queue's trigger notes: which look a
reconcile is follows from the clock, so any reconcile that runs in between (another trigger) leaves
the pending re-read in place, and ``Result.reason`` stays a note for logs and metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class Settle:
    """One object's pending re-read: the look it will be (1 = first re-read) and when it is due."""

    pending: int | None = None
    due: float = 0.0

    def look(self, woken_by_event: bool, now: float) -> int | None:
        """Which look this reconcile is: 0 woken by a runtime event, n the due n-th re-read, else
        None (a re-read not yet due stays scheduled)."""
        if woken_by_event:
            return 0
        if self.pending is not None and now >= self.due:
            return self.pending
        return None

    def after(
        self, look: int | None, found_nothing: bool, delays: Sequence[float], now: float
    ) -> float | None:
        """Record the outcome of this reconcile's ``look``; the delay until the next re-read (a new
        one when the look found nothing, else the remaining wait of one still pending), or None."""
        if look is None:
            return None if self.pending is None else max(0.0, self.due - now)
        self.pending = None
        if found_nothing and look < len(delays):
            self.pending, self.due = look + 1, now + delays[look]
            return delays[look]
        return None
