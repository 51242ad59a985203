"""The runtime Kyma's status is KCP's, with template references into the runtime and no Manifests."""

from __future__ import annotations

from typing import Any

from kyma_operator.controllers.kyma.skrsync import runtime_status


def test_runtime_status_points_templates_into_the_runtime_and_drops_manifests_and_nulls() -> None:
    status: dict[str, Any] = {
        "state": "Ready",
        "activeChannel": None,
        "modules": [
            {
                "name": "m",
                "state": "Ready",
                "message": None,
                "manifest": {"metadata": {"name": "k-m-1", "namespace": "kcp-system"}},
                "template": {
                    "kind": "ModuleTemplate",
                    "metadata": {"name": "m-1.0.0", "namespace": "kcp-system"},
                },
            }
        ],
    }
    copied = runtime_status(status, "kyma-system")
    assert copied == {
        "state": "Ready",
        "modules": [
            {
                "name": "m",
                "state": "Ready",
                "template": {
                    "kind": "ModuleTemplate",
                    "metadata": {"name": "m-1.0.0", "namespace": "kyma-system"},
                },
            }
        ],
    }
    assert status["modules"][0]["template"]["metadata"]["namespace"] == "kcp-system"  # input untouched


def test_runtime_status_conditions_observe_the_runtime_copys_generation() -> None:
    """The copy's own generation (whose spec the status answers), not the KCP Kyma's."""
    status: dict[str, Any] = {
        "state": "Ready",
        "conditions": [
            {"type": "Modules", "status": "True", "reason": "Ready", "observedGeneration": 7},
            {"type": "SKRWebhook", "status": "True", "reason": "Ready", "observedGeneration": 7},
        ],
    }
    copied = runtime_status(status, "kyma-system", 2)
    assert [c["observedGeneration"] for c in copied["conditions"]] == [2, 2]
    assert [c["observedGeneration"] for c in status["conditions"]] == [7, 7]  # input untouched
    assert runtime_status(status, "kyma-system")["conditions"] == status["conditions"]
