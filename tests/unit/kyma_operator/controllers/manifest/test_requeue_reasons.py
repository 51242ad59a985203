"""Upstream's Manifest requeue reason names from what one reconcile did, and the one
``lifecycle_mgr_requeue_reason_total`` counter both controllers share on a registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from kyma_operator.controllers.kyma.metrics import KymaMetrics
from kyma_operator.controllers.manifest.metrics import ManifestMetrics
from kyma_operator.controllers.manifest.report import CHANGED_OUTCOME, Collector
from kyma_operator.controllers.manifest.requeuereasons import (
    MANIFEST_ADD_FINALIZER,
    MANIFEST_CLIENT_INIT,
    MANIFEST_PRE_DELETE_ENQUEUE_REQUIRED,
    MANIFEST_PRUNE_DIFF_NOT_FINISHED,
    MANIFEST_RECONCILE_FINISHED,
    MANIFEST_SYNC_RESOURCES,
    MANIFEST_SYNC_RESOURCES_ENQUEUE_REQUIRED,
    requeue_reasons,
)
from kyma_operator.runtime.request import Request, Result


def report(outcome: str, message: str = "") -> Collector:
    collected = Collector(Request("kcp-system", "m"), (), 0.0)
    collected.set(outcome, message)
    return collected


@pytest.mark.parametrize(
    ("outcome", "message", "result", "expected"),
    [
        (
            "Processing",
            "Deployment not ready",
            Result(requeue_after=5),
            MANIFEST_SYNC_RESOURCES_ENQUEUE_REQUIRED,
        ),
        ("Ready", "", Result(requeue_after=1800), MANIFEST_RECONCILE_FINISHED),
        ("Warning", "same oci layer", Result(requeue_after=30), MANIFEST_RECONCILE_FINISHED),
        (
            "Deleting",
            "waiting for module CRs to be deleted: ns/mine",
            Result(requeue_after=1),
            MANIFEST_PRE_DELETE_ENQUEUE_REQUIRED,
        ),
        (
            "Deleting",
            "waiting for default CR Sample default to go",
            Result(requeue_after=1),
            MANIFEST_PRE_DELETE_ENQUEUE_REQUIRED,
        ),
        (
            "Deleting",
            "waiting for the removal of Deployment x",
            Result(requeue_after=1),
            MANIFEST_PRUNE_DIFF_NOT_FINISHED,
        ),
        (
            "Deleting",
            "uninstalled; waiting as other finalizers are present: ['x']",
            Result(),
            MANIFEST_RECONCILE_FINISHED,
        ),
        ("deleted", "uninstalled, finalizers removed", Result(), MANIFEST_RECONCILE_FINISHED),
    ],
)
def test_intended_reasons(outcome: str, message: str, result: Result, expected: str) -> None:
    assert requeue_reasons(report(outcome, message), result, added_finalizer=False) == [
        (expected, "intended")
    ]


def test_failures_are_unexpected_under_the_failing_step() -> None:
    runtime = report("Error", "cannot reach the runtime: no access Secret")
    assert requeue_reasons(runtime, Result(requeue=True), added_finalizer=False) == [
        (MANIFEST_CLIENT_INIT, "unexpected")
    ]
    apply = report("Error", "oci: apply failed: boom")
    assert requeue_reasons(apply, Result(requeue=True), added_finalizer=False) == [
        (MANIFEST_SYNC_RESOURCES, "unexpected")
    ]


def test_the_added_finalizer_is_counted_with_the_step_the_pass_reached() -> None:
    assert requeue_reasons(report("Processing"), Result(requeue_after=5), added_finalizer=True) == [
        (MANIFEST_ADD_FINALIZER, "intended"),
        (MANIFEST_SYNC_RESOURCES_ENQUEUE_REQUIRED, "intended"),
    ]
    for nothing_ran in ("gone", "skipped", ""):
        assert requeue_reasons(report(nothing_ran), Result(), added_finalizer=True) == []


def test_both_controllers_share_one_counter_on_a_registry() -> None:
    registry = CollectorRegistry()
    kyma = KymaMetrics(registry)
    manifest = ManifestMetrics(registry)  # registering the family twice would raise
    kyma.requeue("kyma_deletion")
    manifest.requeue([(MANIFEST_ADD_FINALIZER, "intended"), (MANIFEST_ADD_FINALIZER, "intended")])
    value = registry.get_sample_value
    total = "lifecycle_mgr_requeue_reason_total"
    assert value(total, {"requeue_reason": "kyma_deletion", "requeue_type": "intended"}) == 1
    assert value(total, {"requeue_reason": MANIFEST_ADD_FINALIZER, "requeue_type": "intended"}) == 2


def test_mandatory_modules_count_at_scrape_time() -> None:
    registry = CollectorRegistry()
    offered = [3]
    KymaMetrics(registry, mandatory_count=lambda: offered[0])
    assert registry.get_sample_value("lifecycle_mgr_mandatory_modules") == 3
    offered[0] = 0
    assert registry.get_sample_value("lifecycle_mgr_mandatory_modules") == 0


def test_a_reconcile_cut_short_by_a_changed_manifest_counts_no_reason() -> None:
    assert (
        requeue_reasons(report(CHANGED_OUTCOME, "changed"), Result(requeue=True), added_finalizer=False) == []
    )
