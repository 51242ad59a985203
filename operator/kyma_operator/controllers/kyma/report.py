"""What one Kyma reconcile did (``KymaReport``, the shared report model with the Kyma's details) and
its mutable collector while the reconcile runs."""

from __future__ import annotations

from dataclasses import dataclass

from kyma_operator.api.meta import State
from kyma_operator.controllers.common.report import ReconcileReport
from kyma_operator.runtime.request import Request


@dataclass(frozen=True)
class KymaReport(ReconcileReport):
    """What one reconcile did; observers get one per reconcile (logs, local run, benchmarks)."""

    runtime_id: str = ""
    remote_spec: str = ""
    modules: tuple[tuple[str, str], ...] = ()
    """(module, state) of ``status.modules`` as written (module half only)."""
    manifests_applied: tuple[str, ...] = ()
    manifests_deleted: tuple[str, ...] = ()
    checks_left: float | None = None
    """Seconds until the runtime's agent and catalog are checked, if this reconcile left them out
    (``KymaReconciler._leave_checks``)."""

    KIND = "Kyma"

    def details(self) -> str:
        spec = f"; runtime Kyma {self.remote_spec}" if self.remote_spec else ""
        modules = ""
        if self.modules:
            modules = "; modules " + ", ".join(f"{m}={s}" for m, s in self.modules)
        writes = ""
        if self.manifests_applied or self.manifests_deleted:
            writes = (
                f"; Manifests applied {list(self.manifests_applied)} deleted {list(self.manifests_deleted)}"
            )
        later = ""
        if self.checks_left is not None:
            later = f"; agent and catalog checked in {self.checks_left:.1f} s"
        return f"{spec}{modules}{writes}{later}"


class Collector:
    """Mutable collector for one ``KymaReport``."""

    def __init__(self, request: Request, triggers: tuple[str, ...], started: float) -> None:
        self.request = request
        self.triggers = triggers
        self.started = started
        self.outcome = ""
        self.message = ""
        self.runtime_id = ""
        self.remote_spec = ""
        self.status_written = False
        self.requeue_reason = ""
        self.modules: tuple[tuple[str, str], ...] = ()
        self.applied: list[str] = []
        self.deleted: list[str] = []
        self.mandatory: dict[str, State] | None = None
        self.catalog_writes = 0
        self.checks_left: float | None = None
        self.wake_after: float | None = None
        """Seconds until a maintenance window an upgrade waits for begins (reconcile again then)."""

    def set(self, outcome: str, message: str, status_written: bool = False) -> None:
        self.outcome = outcome
        self.message = message
        self.status_written = status_written

    def freeze(self, now: float) -> KymaReport:
        return KymaReport(
            request=self.request,
            triggers=self.triggers,
            started=self.started,
            outcome=self.outcome,
            message=self.message,
            runtime_id=self.runtime_id,
            remote_spec=self.remote_spec,
            status_written=self.status_written,
            duration=max(0.0, now - self.started),
            modules=self.modules,
            manifests_applied=tuple(self.applied),
            manifests_deleted=tuple(self.deleted),
            checks_left=self.checks_left,
        )
