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
