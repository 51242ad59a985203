"""What one Manifest reconcile did (``ManifestReport``, the shared report model with the Manifest's
details) and its mutable collector while the reconcile runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from kyma_operator.controllers.common.report import ReconcileReport
from kyma_operator.runtime.request import Request

CHANGED_OUTCOME: Final = "changed"
"""The outcome of a reconcile cut short because the Manifest changed under it (no status written)."""


@dataclass(frozen=True)
class ManifestReport(ReconcileReport):
    """What one reconcile did (logs, tests, benchmarks)."""

    applied: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()

    KIND = "Manifest"

    def details(self) -> str:
        wrote = f"; applied {len(self.applied)}" if self.applied else ""
        pruned = f"; pruned {len(self.pruned)}" if self.pruned else ""
        return f"{wrote}{pruned}"


@dataclass
class Collector:
    request: Request
    triggers: tuple[str, ...]
    started: float
    outcome: str = ""
    message: str = ""
    applied: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    status_written: bool = False
    waiting_removal: bool = False
    """The reconcile waits for the runtime to remove something (short backoff, see config)."""

    def set(self, outcome: str, message: str) -> None:
        self.outcome = outcome
        self.message = message

    def freeze(self, now: float) -> ManifestReport:
        return ManifestReport(
            request=self.request,
            triggers=self.triggers,
            started=self.started,
            outcome=self.outcome,
            message=self.message,
            applied=tuple(self.applied),
            pruned=tuple(self.pruned),
            status_written=self.status_written,
            duration=max(0.0, now - self.started),
        )
