"""The pure parts of apply and prune: drift detection and upstream's prune sets and phases."""

from __future__ import annotations

from typing import Any

from kyma_operator.api.manifest import SyncedResource
from kyma_operator.controllers.common.drift import contains, up_to_date
from kyma_operator.controllers.manifest.prune import phases, prune_candidates


def test_contains_is_a_subset_check_tolerating_server_defaults() -> None:
    desired = {"spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}}
    live = {
        "spec": {
            "replicas": 1,
            "strategy": {"type": "RollingUpdate"},
            "template": {
                "spec": {"containers": [{"name": "a", "image": "x", "imagePullPolicy": "IfNotPresent"}]}
            },
        }
    }
    assert contains(desired, live)
    assert not contains({"spec": {"replicas": 2}}, live)
    assert not contains({"spec": {"template": {"spec": {"containers": []}}}}, live)
    assert contains({"a": None, "b": {}, "c": []}, {})
    assert not contains({"a": True}, {"a": 1})


def test_up_to_date_needs_our_labels_and_no_deletion() -> None:
    desired = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"l": "1"}},
        "data": {"k": "v"},
    }
    live: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"l": "1", "x": "y"}},
        "data": {"k": "v"},
    }
    assert up_to_date(desired, live)
    assert not up_to_date(desired, None)
    assert not up_to_date(desired, {**live, "metadata": {"name": "c"}})
    assert not up_to_date(desired, {**live, "data": {"k": "edited"}})
    deleting = {
        **live,
        "metadata": {"name": "c", "labels": {"l": "1"}, "deletionTimestamp": "2026-01-01T00:00:00Z"},
    }
    assert not up_to_date(desired, deleting)


def entry(kind: str, name: str, group: str = "", namespace: str = "") -> SyncedResource:
    return SyncedResource(group=group, version="v1", kind=kind, name=name, namespace=namespace)


def test_prune_candidates_never_kyma_system() -> None:
    synced = [
        entry("Namespace", "kyma-system"),
        entry("ConfigMap", "a", namespace="x"),
        entry("ConfigMap", "b", namespace="x"),
    ]
    target = [entry("ConfigMap", "a", namespace="x")]
    assert [c.name for c in prune_candidates(synced, target, ("kyma-system",))] == ["b"]


def test_two_phases_operator_kinds_last() -> None:
    entries = [
        entry("Deployment", "op", "apps", "m"),
        entry("Sample", "s", "operator.kyma-project.io", "m"),
        entry("CustomResourceDefinition", "samples", "apiextensions.k8s.io"),
        entry("ConfigMap", "c", namespace="m"),
    ]
    first, second = phases(entries)
    assert [e.kind for e in first] == ["Sample", "ConfigMap"]
    assert [e.kind for e in second] == ["Deployment", "CustomResourceDefinition"]
