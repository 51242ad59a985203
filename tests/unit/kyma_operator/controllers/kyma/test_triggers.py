"""Why-it-ran bookkeeping, the Manifest request log and the heartbeat sweep (no API involved)."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from kyma_operator.controllers.common.heartbeat import AgentHealth
from kyma_operator.controllers.kyma.catalogtriggers import manifest_change_matters
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSweep, ObservedHealth
from kyma_operator.controllers.kyma.triggers import KymaTrigger, ManifestRequestLog
from kyma_operator.runtime.clock import FakeClock, settle
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.triggers import TriggerLog
from kyma_wire.names import KCP_NAMESPACE, RUNTIME_ID_LABEL

A = Request(KCP_NAMESPACE, "a")
B = Request(KCP_NAMESPACE, "b")


def test_trigger_log_collects_distinct_reasons_until_taken() -> None:
    log = TriggerLog()
    log.note(A, "x")
    log.note(A, "y")
    log.note(A, "x")
    assert log.take(A) == ("x", "y")
    assert log.take(A) == ()
    assert len(log) == 0


def test_manifest_requests_are_counted_until_a_manifest_controller_exists() -> None:
    registry = CollectorRegistry()
    sink = ManifestRequestLog(registry)
    assert sink.offer(Request(KCP_NAMESPACE, "m1"))
    assert sink.offer(Request(KCP_NAMESPACE, "m2"))
    assert (sink.count, sink.depth()) == (2, 0)
    assert registry.get_sample_value("kyma_operator_manifest_requests_unhandled_total") == 2


class Idle:
    async def reconcile(self, request: Request) -> Result:
        return Result()


class Kymas:
    def __init__(self, *objs: dict[str, Any]) -> None:
        self.objs = list(objs)

    def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [o for o in self.objs if namespace is None or o["metadata"]["namespace"] == namespace]


def kyma(name: str, runtime_id: str | None) -> dict[str, Any]:
    labels = {RUNTIME_ID_LABEL: runtime_id} if runtime_id else {}
    return {"metadata": {"name": name, "namespace": KCP_NAMESPACE, "labels": labels}}


class Heartbeats:
    def __init__(self) -> None:
        self.healthy: set[str] = set()

    def is_healthy(self, runtime_id: str, max_silence: float | None = None) -> bool:
        return runtime_id in self.healthy

    def last_seen(self, runtime_id: str) -> float | None:
        return 1.0 if runtime_id in self.healthy else None


async def test_sweep_enqueues_only_kymas_whose_agent_health_flipped() -> None:
    observed = ObservedHealth()
    clock = FakeClock()
    heartbeats = Heartbeats()
    registry = CollectorRegistry()
    sweep = HeartbeatSweep(
        Kymas(kyma("a", "rt-a"), kyma("b", "rt-b"), kyma("c", "rt-c"), kyma("d", None)),
        observed,
        AgentHealth(heartbeats),
        reason=KymaTrigger.HEARTBEAT,
        namespace=KCP_NAMESPACE,
        interval=30,
        clock=clock,
        registry=registry,
    )
    controller = Controller("kyma", Idle(), clock=clock)
    controller.add_source(sweep)
    observed.record(A, False)  # a: unhealthy when last reconciled
    observed.record(B, True)  # b: healthy when last reconciled
    # c: never reconciled -> not swept (its first reconcile decides)
    heartbeats.healthy = {"rt-b"}
    assert sweep.sweep() == 0
    heartbeats.healthy = {"rt-a"}  # a came back, b went silent
    task = asyncio.create_task(sweep.run())
    await clock.wait_for_pending()
    clock.advance(30)
    await settle()
    task.cancel()
    assert controller.queue.bulk == 2  # a timer over every Kyma: bulk work, behind users' changes
    assert sorted(controller.queue.get_nowait() for _ in range(2)) == [A, B]  # type: ignore[type-var]
    assert controller.triggers.take(A) == (KymaTrigger.HEARTBEAT,)
    assert sweep.enqueued == 2
    assert health_changes(registry) == {("alive", "sweep"): 1, ("silent", "sweep"): 1}


def health_changes(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """``kyma_operator_agent_health_changes_total`` by (now, noticed_by), the non-zero ones."""
    found = {}
    for now in ("alive", "silent"):
        for by in ("heartbeat", "sweep"):
            labels = {"now": now, "noticed_by": by}
            value = registry.get_sample_value("kyma_operator_agent_health_changes_total", labels)
            if value:
                found[now, by] = value
    return found


def test_a_heartbeat_wakes_only_the_kyma_that_saw_its_agent_silent() -> None:
    observed = ObservedHealth()
    heartbeats = Heartbeats()
    registry = CollectorRegistry()
    sweep = HeartbeatSweep(
        Kymas(),
        observed,
        AgentHealth(heartbeats),
        reason=KymaTrigger.HEARTBEAT,
        interval=30,
        clock=FakeClock(),
        registry=registry,
    )
    assert not sweep.beat("rt-a", KCP_NAMESPACE, "a")  # not bound to a controller yet
    controller = Controller("kyma", Idle(), clock=FakeClock())
    controller.add_source(sweep)
    C = Request(KCP_NAMESPACE, "c")
    observed.record(A, False)  # a's last reconcile saw its agent silent
    observed.record(B, True)  # b's saw it alive
    # c: never reconciled here -> left to its first reconcile (and to its failure backoff)
    heartbeats.healthy = {"rt-a", "rt-b", "rt-c"}
    assert [sweep.beat(rt, KCP_NAMESPACE, r.name) for rt, r in (("rt-a", A), ("rt-b", B), ("rt-c", C))] == [
        True,
        False,
        False,
    ]
    assert controller.queue.bulk == 1  # bulk work: an outage's end revives every agent at once
    assert controller.queue.get_nowait() == A
    assert controller.triggers.take(A) == (KymaTrigger.HEARTBEAT,)
    assert sweep.revived == 1 and sweep.enqueued == 0
    assert health_changes(registry) == {("alive", "heartbeat"): 1}
    # a beat that does not make the agent count as alive (a zero silence limit, say) wakes nothing
    heartbeats.healthy = set()
    assert not sweep.beat("rt-a", KCP_NAMESPACE, "a")
    assert len(controller.queue) == 0


def test_manifest_changes_reuse_the_runtime_round_even_with_a_re_read_pending() -> None:
    from kyma_operator.agentinstall.readiness import AgentStatus
    from kyma_operator.api.meta import State
    from kyma_operator.controllers.kyma import status as st
    from kyma_operator.controllers.kyma.memory import KymaMemory, RuntimeRound

    memory = KymaMemory()
    agent = AgentStatus(ready=True, error=False, reason="Ready", message="the agent is ready")
    manifest = frozenset({KymaTrigger.MANIFEST_CHANGED})
    assert memory.reusable_round(manifest, None, 10.0) is None  # no full reconcile yet
    memory.round = RuntimeRound({}, st.Outcome(State.READY, (), "kyma is ready"), agent)
    assert memory.reusable_round(manifest, None, 10.0) is memory.round
    # a re-read's note (for logs) does not count as a cause
    assert memory.reusable_round(manifest | {KymaTrigger.RUNTIME_EVENT_REREAD}, None, 10.0) is memory.round
    # a later re-read pending (not due): the Manifest change reuses the round
    memory.settle.after(1, True, (0.03, 0.5), now=10.0)
    assert memory.settle.pending == 2
    assert memory.reusable_round(manifest, None, 10.0) is memory.round
    # ... but not before the first re-read: the runtime write the event overtook may be landing now
    memory.settle.after(0, True, (0.03, 0.5), now=10.0)
    assert memory.settle.pending == 1
    assert memory.reusable_round(manifest, None, 10.0) is None
    memory.settle.after(1, False, (0.03, 0.5), now=10.0)
    # a re-read due now, or anything that may have changed the runtime or the KCP Kyma: full
    assert memory.reusable_round(manifest, 1, 10.0) is None
    assert memory.reusable_round(manifest | {KymaTrigger.RUNTIME_EVENT}, None, 10.0) is None
    assert memory.reusable_round(manifest | {KymaTrigger.KYMA_CHANGED}, None, 10.0) is None
    assert memory.reusable_round(frozenset(), None, 10.0) is None
    # checks left out by a reconcile that wrote Manifests: reused until they fall due, then full
    memory.checks_due = 11.0
    assert memory.reusable_round(manifest, None, 10.9) is memory.round
    assert memory.reusable_round(manifest, None, 11.0) is None
    assert memory.reusable_round(manifest | {KymaTrigger.RUNTIME_CHECKS_DUE}, None, 11.0) is None


def test_triggers_parse_into_members_and_ignore_other_notes() -> None:
    reasons = ("Manifest changed", "runtime event", "something else")
    assert KymaTrigger.of(reasons) == {KymaTrigger.MANIFEST_CHANGED, KymaTrigger.RUNTIME_EVENT}


def _manifest(generation: int, state: str, observed: int, operation: str = "installation is ready") -> JSON:
    return {
        "metadata": {"name": "m", "namespace": KCP_NAMESPACE, "generation": generation, "labels": {}},
        "status": {"state": state, "observedGeneration": observed, "lastOperation": {"operation": operation}},
    }


def test_a_manifest_ready_again_for_its_new_spec_wakes_its_kyma() -> None:
    """Ready for the old spec -> Ready for the new one changes only ``observedGeneration``: the
    Kyma's entry was Processing meanwhile (a status of an older spec is not current) and must be
    reconciled to say Ready."""
    upgraded = _manifest(2, "Ready", 1)
    ready_again = _manifest(2, "Ready", 2)
    assert manifest_change_matters(upgraded, ready_again)
    assert not manifest_change_matters(ready_again, _manifest(2, "Ready", 2))  # a resync: nothing
    assert manifest_change_matters(_manifest(1, "Ready", 1), upgraded)  # the spec change itself


def test_only_edits_may_leave_the_runtime_checks_for_later() -> None:
    from kyma_operator.controllers.kyma.memory import woken_by_edits

    runtime_event = frozenset({KymaTrigger.RUNTIME_EVENT})
    assert woken_by_edits(runtime_event, 0)
    assert woken_by_edits(frozenset({KymaTrigger.RUNTIME_EVENT_REREAD}), 1)  # a settle re-read
    assert woken_by_edits(frozenset({KymaTrigger.KYMA_CHANGED, KymaTrigger.MANIFEST_CHANGED}), None)
    assert woken_by_edits(frozenset({KymaTrigger.MANIFEST_CHANGED, KymaTrigger.RUNTIME_CHECKS_DUE}), None)
    # a timer (no cause), a note alone, or any cause that may concern the agent or the catalog: check now
    assert not woken_by_edits(frozenset(), None)
    assert not woken_by_edits(frozenset({KymaTrigger.RUNTIME_CHECKS_DUE}), None)
    for cause in (
        KymaTrigger.CATALOG_CHANGED,
        KymaTrigger.CATALOG_REFRESH,
        KymaTrigger.ACCESS_SECRET,
        KymaTrigger.HEARTBEAT,
        KymaTrigger.WATCHER_FANOUT,
        KymaTrigger.IMAGE_PULL_SECRET,
        KymaTrigger.SHARD_ACQUIRED,
    ):
        assert not woken_by_edits(runtime_event | {cause}, 0), cause
