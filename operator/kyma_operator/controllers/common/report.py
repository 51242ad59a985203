"""What one reconcile did: the one report model of the Kyma and Manifest controllers.

Each reconcile produces one frozen report: it is logged as one line and handed to observers (the
local run prints it, tests and benchmarks wait on it). The controllers extend it with their own
details; the shared part (why it ran, outcome, duration, whether the status was written) reads the
same for both.
"""

from __future__ import annotations

from dataclasses import dataclass

from kyma_operator.runtime.request import Request


@dataclass(frozen=True)
class ReconcileReport:
    request: Request
    triggers: tuple[str, ...]
    """Why it ran (the sources' reasons); empty: a requeue."""
    started: float
    """``Clock.now()`` when the reconcile began."""
    outcome: str
    """A ``State`` value, or ``gone`` / ``deleted`` / ``skipped``."""
    message: str
    status_written: bool = False
    duration: float = 0.0

    KIND = "object"

    def details(self) -> str:
        """The controller's own part of ``line()``."""
        return ""

    def line(self) -> str:
        why = ", ".join(self.triggers) or "requeue"
        written = "" if self.status_written else " (status unchanged)"
        head = f"reconcile {self.KIND} {self.request} [{why}]"
        return f"{head}: {self.outcome}: {self.message}{self.details()}{written}"
