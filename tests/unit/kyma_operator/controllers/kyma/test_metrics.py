"""Upstream's Kyma metrics: one series per state set to 1 for the current one, removed with the Kyma."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kyma_operator.api.kyma import Kyma
from kyma_operator.api.meta import State
from kyma_operator.controllers.kyma.metrics import INTENDED, UNEXPECTED, KymaMetrics
from kyma_operator.runtime.request import Request


def kyma() -> Kyma:
    return Kyma.model_validate(
        {
            "metadata": {
                "name": "k1",
                "namespace": "kcp-system",
                "labels": {"kyma-project.io/instance-id": "i-1"},
                "annotations": {"skr-domain": "k1.example.com"},
            },
            "spec": {"channel": "regular"},
        }
    )


def test_states_requeues_and_forgetting() -> None:
    registry = CollectorRegistry()
    metrics = KymaMetrics(registry)
    labels = {"kyma_name": "k1", "shoot": "k1.example.com", "instance_id": "i-1"}
    metrics.record(
        kyma(), State.PROCESSING, [("m1", State.PROCESSING), ("m2", State.ERROR)], {"base": State.READY}
    )
    assert registry.get_sample_value("lifecycle_mgr_kyma_state", {**labels, "state": "Processing"}) == 1
    assert registry.get_sample_value("lifecycle_mgr_kyma_state", {**labels, "state": "Ready"}) == 0
    assert (
        registry.get_sample_value(
            "lifecycle_mgr_module_state", {**labels, "module_name": "m2", "state": "Error"}
        )
        == 1
    )
    assert (
        registry.get_sample_value(
            "lifecycle_mgr_mandatory_module_state",
            {"kyma_name": "k1", "module_name": "base", "state": "Ready"},
        )
        == 1
    )
    # m2 disabled: its series go
    metrics.record(kyma(), State.READY, [("m1", State.READY)])
    assert registry.get_sample_value("lifecycle_mgr_kyma_state", {**labels, "state": "Ready"}) == 1
    assert (
        registry.get_sample_value(
            "lifecycle_mgr_module_state", {**labels, "module_name": "m2", "state": "Error"}
        )
        is None
    )
    metrics.requeue("kyma_ready_safety_net", INTENDED)
    metrics.requeue("crds_sync", UNEXPECTED)
    assert (
        registry.get_sample_value(
            "lifecycle_mgr_requeue_reason_total",
            {"requeue_reason": "crds_sync", "requeue_type": "unexpected"},
        )
        == 1
    )
    metrics.forget(Request("kcp-system", "k1"))
    assert registry.get_sample_value("lifecycle_mgr_kyma_state", {**labels, "state": "Ready"}) is None
    assert (
        registry.get_sample_value(
            "lifecycle_mgr_module_state", {**labels, "module_name": "m1", "state": "Ready"}
        )
        is None
    )
