"""Which workload a Processing Manifest follows, and which of its status writes count as the turn
(``controllers/manifest/workloads``): the turn is what the readiness rule calls not Processing."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.api.meta import State
from kyma_operator.controllers.manifest.readiness import deployment_readiness
from kyma_operator.controllers.manifest.workloads import Workload, WorkloadWatches, turned
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import DEPLOYMENTS, STATEFULSETS

JSON = dict[str, Any]


def _obj(kind: str, name: str = "op", *, version: str | None = "7", status: JSON | None = None) -> JSON:
    meta: JSON = {"name": name, "namespace": "mod", "generation": 1}
    if version is not None:
        meta["resourceVersion"] = version
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "status": status or {}}


def _progressing(reason: str, available: str = "False") -> JSON:
    return {
        "observedGeneration": 1,
        "conditions": [
            {"type": "Available", "status": available},
            {"type": "Progressing", "status": "True", "reason": reason},
        ],
    }


def test_the_first_deployment_or_statefulset_is_followed_as_read() -> None:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "mod"}}
    live = [config, _obj("StatefulSet", "db", version="9"), _obj("Deployment")]
    assert Workload.of(live) == Workload(STATEFULSETS, "mod", "db", "9")
    assert Workload.of([config, _obj("Deployment")]) == Workload(DEPLOYMENTS, "mod", "op", "7")


def test_nothing_is_followed_without_a_workload_or_what_a_watch_needs() -> None:
    assert Workload.of([]) is None
    assert Workload.of([_obj("Deployment", version=None)]) is None
    no_namespace = _obj("Deployment")
    del no_namespace["metadata"]["namespace"]
    assert Workload.of([no_namespace]) is None
    foreign = {**_obj("Deployment"), "apiVersion": "example.io/v1"}
    assert Workload.of([foreign]) is None


@pytest.mark.parametrize(
    ("status", "is_turn"),
    [
        ({}, False),  # created, not observed by its controller yet: Processing
        (_progressing("ReplicaSetUpdated"), False),  # a rollout's intermediate write
        (_progressing("NewReplicaSetCreated"), False),
        (_progressing("NewReplicaSetAvailable"), False),  # done but not Available: Processing
        (_progressing("NewReplicaSetAvailable", available="True"), True),  # Ready
        ({"observedGeneration": 1, "conditions": []}, True),  # Error: no Progressing reported
        (
            {"observedGeneration": 1, "conditions": [{"type": "Progressing", "status": "False"}]},
            True,  # Error: ProgressDeadlineExceeded and the like
        ),
    ],
)
def test_a_deployment_turns_when_the_readiness_rule_stops_saying_processing(
    status: JSON, is_turn: bool
) -> None:
    deployment = _obj("Deployment", status=status)
    assert turned(deployment) is is_turn
    assert (deployment_readiness(deployment).state is not State.PROCESSING) is is_turn


def test_a_statefulset_turns_when_every_replica_is_ready() -> None:
    sts = _obj("StatefulSet", status={"readyReplicas": 1})
    sts["spec"] = {"replicas": 2}
    assert not turned(sts)
    sts["status"]["readyReplicas"] = 2
    assert turned(sts)
    assert turned({**_obj("StatefulSet", status={"readyReplicas": 1})})  # spec.replicas defaults to 1


def test_limits_are_checked_and_nothing_is_followed_before_the_controller_runs() -> None:
    with pytest.raises(ValueError, match="limit"):
        WorkloadWatches(limit=-1)
    with pytest.raises(ValueError, match="duration"):
        WorkloadWatches(duration=0)
    watches = WorkloadWatches(limit=4)
    client = KubeClient.__new__(KubeClient)  # never used: nothing is followed while not running
    watches.follow(Request("kcp", "m"), client, Workload(DEPLOYMENTS, "mod", "op", "7"))
    assert len(watches) == 0
    assert watches.following(Request("kcp", "m")) is None
