"""Is the installed module ready? Upstream's rule (reference §4.3 step 14), messages that say why.

The first Deployment or StatefulSet among the rendered objects decides (``spec.manager`` is
ignored, as upstream, #1831):

* Deployment: ``Available=True`` and ``Progressing=True`` with reason ``NewReplicaSetAvailable``
  -> Ready; ``Progressing=True`` with ``FoundNewReplicaSet``, ``NewReplicaSetCreated``,
  ``ReplicaSetUpdated`` (or ``NewReplicaSetAvailable`` without ``Available``) -> Processing;
  anything else (no conditions yet included) -> Error;
* StatefulSet: ``replicas == readyReplicas`` -> Ready; otherwise the first pod's first container:
  started and ready -> Ready, started only -> Processing, else Error; no pods -> Error;
* no Deployment or StatefulSet -> Ready.

One refinement: a Deployment its controller has not observed yet (``status.observedGeneration``
below ``metadata.generation``, no conditions) is Processing, not Error: upstream reports a module
Error for the moment between creating a Deployment and its controller's first status write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from kyma_operator.api.meta import State
from kyma_operator.controllers.manifest.apply import describe
from kyma_operator.runtime.objects import JSON

PROCESSING_REASONS = frozenset({"FoundNewReplicaSet", "NewReplicaSetCreated", "ReplicaSetUpdated"})
READY_REASON = "NewReplicaSetAvailable"

PodLister = Callable[[JSON], Awaitable[list[JSON]]]
"""Lists the pods of a StatefulSet (by its selector, in its namespace)."""


@dataclass(frozen=True)
class Readiness:
    state: State
    message: str


def manager_of(live: Sequence[JSON]) -> JSON | None:
    """The first Deployment or StatefulSet (``apps`` group) among the objects."""
    for obj in live:
        if obj.get("kind") in ("Deployment", "StatefulSet") and str(obj.get("apiVersion", "")).startswith(
            "apps/"
        ):
            return obj
    return None


def _condition(obj: JSON, kind: str) -> JSON | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def deployment_readiness(deployment: JSON) -> Readiness:
    what = describe(deployment)
    available = _condition(deployment, "Available")
    progressing = _condition(deployment, "Progressing")
    is_available = available is not None and available.get("status") == "True"
    if progressing is not None and progressing.get("status") == "True":
        reason = progressing.get("reason")
        if reason == READY_REASON and is_available:
            return Readiness(State.READY, f"{what} is available")
        if reason in PROCESSING_REASONS or reason == READY_REASON:
            return Readiness(State.PROCESSING, f"{what} is rolling out (Progressing: {reason})")
    if progressing is None:
        generation = (deployment.get("metadata") or {}).get("generation") or 0
        observed = (deployment.get("status") or {}).get("observedGeneration") or 0
        if observed < generation:
            return Readiness(
                State.PROCESSING, f"{what}: generation {generation} not observed by its controller yet"
            )
        return Readiness(State.ERROR, f"{what} is not ready: no Progressing condition reported")
    detail = progressing.get("message") or progressing.get("reason") or "no reason given"
    return Readiness(
        State.ERROR,
        f"{what} is not ready: Progressing={progressing.get('status')} ({detail})",
    )


async def statefulset_readiness(statefulset: JSON, list_pods: PodLister) -> Readiness:
    what = describe(statefulset)
    status = statefulset.get("status") or {}
    replicas = (statefulset.get("spec") or {}).get("replicas", 1)
    ready = status.get("readyReplicas") or 0
    if replicas == ready:
        return Readiness(State.READY, f"{what} has all {ready} replicas ready")
    pods = await list_pods(statefulset)
    if not pods:
        return Readiness(State.ERROR, f"{what} is not ready: {ready}/{replicas} replicas ready and no pods")
    pod = sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name")))[0]
    pod_name = (pod.get("metadata") or {}).get("name")
    containers = (pod.get("status") or {}).get("containerStatuses") or []
    if not containers:
        return Readiness(State.ERROR, f"{what} is not ready: pod {pod_name} reports no container status")
    first = containers[0]
    if first.get("started") and first.get("ready"):
        return Readiness(State.READY, f"{what}: pod {pod_name} is ready")
    if first.get("started"):
        return Readiness(State.PROCESSING, f"{what} is starting: pod {pod_name} started, not ready yet")
    waiting = ((first.get("state") or {}).get("waiting") or {}).get("reason")
    why = f" ({waiting})" if waiting else ""
    return Readiness(State.ERROR, f"{what} is not ready: pod {pod_name} has not started{why}")


async def module_readiness(live: Sequence[JSON], list_pods: PodLister) -> Readiness:
    manager = manager_of(live)
    if manager is None:
        return Readiness(State.READY, "no Deployment or StatefulSet to wait for")
    if manager["kind"] == "Deployment":
        return deployment_readiness(manager)
    return await statefulset_readiness(manager, list_pods)
