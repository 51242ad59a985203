"""Watcher validation: every rule, and messages that say what to fix."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.api.watcher import Watcher
from kyma_operator.api.watcher_validation import validate_watcher
from kyma_wire.names import KCP_NAMESPACE, MANAGED_BY_LABEL, OPERATOR_NAME, WATCHED_BY_LABEL


def _watcher(labels: dict[str, str] | None = None, **spec: Any) -> Watcher:
    base: dict[str, Any] = {
        "manager": OPERATOR_NAME,
        "labelsToWatch": {WATCHED_BY_LABEL: "kyma"},
        "resourceToWatch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
        "field": "spec",
        "serviceInfo": {"name": "events", "namespace": KCP_NAMESPACE, "port": 8082},
        "gateway": {"selector": {"matchLabels": {"gw": "default"}}},
    }
    base.update(spec)
    return Watcher.from_object(
        {"metadata": {"name": "w", "namespace": KCP_NAMESPACE, "labels": labels or {}}, "spec": base}
    )


def test_defaults_and_wildcards_are_valid() -> None:
    assert validate_watcher(_watcher()) == []
    wildcard = _watcher(resourceToWatch={"group": "*", "version": "*", "resource": "*"}, labelsToWatch={})
    assert validate_watcher(wildcard) == []
    core = _watcher(resourceToWatch={"group": "", "version": "v1", "resource": "configmaps"})
    assert validate_watcher(core) == []


def test_manager_falls_back_to_the_managed_by_label() -> None:
    assert validate_watcher(_watcher(manager=None, labels={MANAGED_BY_LABEL: "lm"})) == []
    (problem,) = validate_watcher(_watcher(manager=""))
    assert problem.reason == "ManagerMissing"
    assert "spec.manager" in problem.message and "managed-by" in problem.message


@pytest.mark.parametrize(
    ("service_info", "fragment"),
    [
        ({"name": "", "namespace": "ns", "port": 80}, "name is empty"),
        ({"name": "svc", "namespace": " ", "port": 80}, "namespace is empty"),
        ({"name": "svc", "namespace": "ns", "port": 0}, "port 0 is outside 1-65535"),
        ({"name": "svc", "namespace": "ns", "port": 65536}, "port 65536 is outside 1-65535"),
        ({"name": "Svc_1", "namespace": "ns", "port": 80}, "not a valid Service name"),
    ],
)
def test_service_info(service_info: dict[str, Any], fragment: str) -> None:
    (problem,) = validate_watcher(_watcher(serviceInfo=service_info))
    assert problem.reason == "InvalidServiceInfo"
    assert problem.message.startswith("spec.serviceInfo: ")
    assert fragment in problem.message


def test_all_problems_are_reported_together() -> None:
    problems = validate_watcher(
        _watcher(
            manager="Bad Manager",
            serviceInfo={"name": "", "namespace": "", "port": 0},
            resourceToWatch={"group": "Not_A_Group", "version": "V1", "resource": "ConfigMap"},
            labelsToWatch={"bad key!": "x", "ok": "bad value!"},
        )
    )
    assert [p.reason for p in problems] == [
        "InvalidServiceInfo",
        "InvalidManager",
        "InvalidResourceToWatch",
        "InvalidLabelsToWatch",
    ]
    assert "name is empty; namespace is empty; port 0" in problems[0].message
    assert "'Bad Manager'" in problems[1].message
    assert "'Not_A_Group'" in problems[2].message and "'V1'" in problems[2].message
    assert "'ConfigMap'" in problems[2].message
    assert "'bad key!'" in problems[3].message and "'bad value!'" in problems[3].message
