"""Why a Manifest reconcile runs again, in upstream's ``lifecycle_mgr_requeue_reason_total`` names.

Why this exists: upstream's Manifest controller counts every requeue under a reason named after
the step that asked for it (``internal/pkg/metrics/manifest.go``), and its e2e
(``kyma_metrics_test.go``) reads them: ``manifest_add_finalizer`` and
``manifest_sync_resources_enqueue_required`` while a module installs, ``manifest_pre_delete_enqueue_required``
and ``manifest_reconcile_finished`` while it is removed. Dashboards built on them must keep working.

Our reconcile does several of upstream's steps in one pass (it adds the finalizer and carries on
instead of requeueing), so the reasons are derived from what the pass did: every step upstream
would have requeued after is counted once, ``intended``; a failed pass is counted under the
upstream reason of the failing step, ``unexpected``.
"""

from __future__ import annotations

from typing import Final

from kyma_operator.api.meta import State
from kyma_operator.controllers.common.requeuemetrics import INTENDED, UNEXPECTED
from kyma_operator.controllers.manifest.report import CHANGED_OUTCOME, Collector
from kyma_operator.runtime.request import Result

MANIFEST_ADD_FINALIZER: Final = "manifest_add_finalizer"
MANIFEST_SYNC_RESOURCES_ENQUEUE_REQUIRED: Final = "manifest_sync_resources_enqueue_required"
MANIFEST_PRE_DELETE_ENQUEUE_REQUIRED: Final = "manifest_pre_delete_enqueue_required"
MANIFEST_PRUNE_DIFF_NOT_FINISHED: Final = "manifest_prune_diff_not_finished"
MANIFEST_RECONCILE_FINISHED: Final = "manifest_reconcile_finished"
MANIFEST_CLIENT_INIT: Final = "manifest_client_init"
MANIFEST_SYNC_RESOURCES: Final = "manifest_sync_resources"

# Deleting outcomes that wait for the module's CRs (upstream: RemoveDefaultModuleCR says "requeue")
_PRE_DELETE_WAITS = ("waiting for module CRs", "waiting for default CR")
# Failures before anything reached the runtime (upstream: the runtime client could not be built)
_CLIENT_FAILURES = ("cannot reach the runtime",)


def requeue_reasons(report: Collector, result: Result, *, added_finalizer: bool) -> list[tuple[str, str]]:
    """(reason, type) pairs to count for one finished reconcile (none for a Manifest that is gone)."""
    reasons: list[tuple[str, str]] = []
    outcome = report.outcome
    if outcome in ("", "gone", "skipped", CHANGED_OUTCOME):
        # nothing of upstream's flow ran (skipped: upstream's own skip requeue only; changed: the
        # Manifest changed under the reconcile, which runs again on the new object)
        return reasons
    if added_finalizer:
        reasons.append((MANIFEST_ADD_FINALIZER, INTENDED))
    if outcome == State.ERROR.value:
        failing = (
            MANIFEST_CLIENT_INIT if report.message.startswith(_CLIENT_FAILURES) else MANIFEST_SYNC_RESOURCES
        )
        reasons.append((failing, UNEXPECTED))
    elif outcome == State.PROCESSING.value:
        reasons.append((MANIFEST_SYNC_RESOURCES_ENQUEUE_REQUIRED, INTENDED))
    elif outcome == State.DELETING.value and result.requeue_after is not None:
        waits_for_crs = report.message.startswith(_PRE_DELETE_WAITS)
        reasons.append(
            (
                MANIFEST_PRE_DELETE_ENQUEUE_REQUIRED if waits_for_crs else MANIFEST_PRUNE_DIFF_NOT_FINISHED,
                INTENDED,
            )
        )
    else:  # Ready, Warning, Unmanaged, skipped, uninstalled ("deleted" or waiting for foreign finalizers)
        reasons.append((MANIFEST_RECONCILE_FINISHED, INTENDED))
    return reasons
