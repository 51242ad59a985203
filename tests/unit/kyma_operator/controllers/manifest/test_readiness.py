"""Readiness exactly as upstream's rule (reference §4.3 step 14), with messages naming the object."""

from __future__ import annotations

from typing import Any

from kyma_operator.api.meta import State
from kyma_operator.controllers.manifest.readiness import deployment_readiness, module_readiness

JSON = dict[str, Any]


def deployment(*conditions: tuple[str, str, str]) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "op", "namespace": "mod"},
        "status": {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]},
    }


def statefulset(replicas: int, ready: int) -> JSON:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "mod"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "db"}}},
        "status": {"readyReplicas": ready},
    }


def pod(started: bool, ready: bool, waiting: str = "") -> JSON:
    status: JSON = {"started": started, "ready": ready}
    if waiting:
        status["state"] = {"waiting": {"reason": waiting}}
    return {"metadata": {"name": "db-0"}, "status": {"containerStatuses": [status]}}


def test_deployment_rules() -> None:
    ready = deployment(
        ("Available", "True", "MinimumReplicasAvailable"), ("Progressing", "True", "NewReplicaSetAvailable")
    )
    assert deployment_readiness(ready).state is State.READY
    for reason in ("FoundNewReplicaSet", "NewReplicaSetCreated", "ReplicaSetUpdated"):
        assert deployment_readiness(deployment(("Progressing", "True", reason))).state is State.PROCESSING
    not_available = deployment(("Available", "False", "x"), ("Progressing", "True", "NewReplicaSetAvailable"))
    assert deployment_readiness(not_available).state is State.PROCESSING
    failed = deployment_readiness(deployment(("Progressing", "False", "ProgressDeadlineExceeded")))
    assert failed.state is State.ERROR
    assert "Deployment mod/op" in failed.message and "ProgressDeadlineExceeded" in failed.message
    observed = deployment()
    observed["status"]["observedGeneration"] = 1
    assert deployment_readiness(observed).state is State.ERROR
    assert "no Progressing condition" in deployment_readiness(observed).message
    fresh = deployment()
    fresh["metadata"]["generation"] = 1
    assert deployment_readiness(fresh).state is State.PROCESSING
    assert "not observed" in deployment_readiness(fresh).message


async def test_statefulset_rules() -> None:
    async def no_pods(_: JSON) -> list[JSON]:
        return []

    def pods(*items: JSON) -> Any:
        async def lister(_: JSON) -> list[JSON]:
            return list(items)

        return lister

    assert (await module_readiness([statefulset(2, 2)], no_pods)).state is State.READY
    none = await module_readiness([statefulset(2, 1)], no_pods)
    assert none.state is State.ERROR and "StatefulSet mod/db" in none.message
    assert (await module_readiness([statefulset(2, 1)], pods(pod(True, True)))).state is State.READY
    assert (await module_readiness([statefulset(2, 1)], pods(pod(True, False)))).state is State.PROCESSING
    crash = await module_readiness([statefulset(2, 1)], pods(pod(False, False, "CrashLoopBackOff")))
    assert crash.state is State.ERROR and "CrashLoopBackOff" in crash.message


async def test_first_manager_decides_and_none_is_ready() -> None:
    async def no_pods(_: JSON) -> list[JSON]:
        return []

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert (await module_readiness([cm], no_pods)).state is State.READY
    first = deployment(("Progressing", "True", "ReplicaSetUpdated"))
    assert (await module_readiness([cm, first, statefulset(1, 1)], no_pods)).state is State.PROCESSING
