"""The real SKR API server calls the agent; the stand-in KCP receives the expected events.

Per write: the right manager and operation, and exactly one event at KCP for every admission in
which the agent saw a change (the API server may admit one write twice, see ``write_and_collect``).
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from kyma_wire.events import GroupVersionKind, ObjectKey, Operation
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME, OWNED_BY_ANNOTATION, SKR_NAMESPACE
from tests.controlplane.cluster import APIServer
from tests.integration.skr_watcher.harness import GROUP, WATCH_LABEL, WIDGETS, AgentRig, agent_rig, widget
from tests.integration.skr_watcher.receiver import Received, named

MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def rig(skr: APIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentRig]:
    tag = f"agent-ev-{uuid.uuid4().hex[:6]}"
    with agent_rig(skr, tmp_path_factory.mktemp("agent-events"), tag, HEARTBEAT_INTERVAL="1s") as rig:
        yield rig


def sentinel(rig: AgentRig) -> None:
    """Create a watched ConfigMap and wait for its event: everything admitted before it was handled."""
    name = f"sentinel-{uuid.uuid4().hex[:6]}"
    rig.core.create_namespaced_config_map(
        rig.namespace, {"metadata": {"name": name, "labels": {WATCH_LABEL: rig.label}}}
    )
    rig.receiver.wait_for(lambda: bool(rig.receiver.events(named(rig.namespace, name))), what=name)
    rig.receiver.wait_for(lambda: rig.agent.metric("watcher_queue_depth") == 0, what="empty queue")


def events_for(rig: AgentRig, name: str) -> list[Received]:
    return rig.receiver.events(named(rig.namespace, name))


@dataclass(frozen=True)
class Tally:
    changed: float
    """Admissions in which the agent saw a change: each queues an event or merges into one."""
    merged: float
    """Events folded into another before they were sent (coalesced while waiting, or superseded)."""


def settle(rig: AgentRig) -> Tally:
    """Wait until every event the agent queued is settled (sent, superseded or dropped)."""
    tally: list[Tally] = []

    def settled() -> bool:
        metrics = rig.agent.metrics()

        def total(name: str) -> float:
            return sum(value for (sample, _labels), value in metrics.items() if sample == name)

        queued = total("watcher_events_queued_total")
        superseded = total("watcher_events_superseded_total")
        finished = total("watcher_events_sent_total") + superseded + total("watcher_events_dropped_total")
        if queued != finished:
            return False
        changed = metrics.get(("watcher_admission_decision_total", (("decision", "changed"),)), 0.0)
        tally.append(Tally(changed, total("watcher_events_coalesced_total") + superseded))
        return True

    rig.receiver.wait_for(settled, what="every queued event sent")
    return tally[-1]


def write_and_collect(rig: AgentRig, name: str, write: Callable[[], object]) -> list[tuple[str, Operation]]:
    """(manager, operation) of the events for ``name`` that ``write`` caused, once all are sent.

    The API server may call the webhook more than once for one write: it applies an update to its
    cached copy of the object and, when that copy was stale, tries again with the current one, and
    admission runs again. So one change may reach KCP as more than one identical event. What holds
    exactly: every admission in which the agent saw a change gave one event at KCP (or was merged
    into one before sending) -- none lost, none invented.
    """
    before, seen = settle(rig), len(events_for(rig, name))
    write()
    after = settle(rig)
    new = events_for(rig, name)[seen:]
    changed, merged = after.changed - before.changed, after.merged - before.merged
    assert len(new) + merged == changed, (new, changed, merged)
    return [(r.manager, r.event.operation) for r in new if r.event and r.event.operation]


def one_change(events: list[tuple[str, Operation]], manager: str, operation: Operation) -> None:
    """One change: at least one event, every one of them ``operation`` for ``manager``."""
    assert events and set(events) == {(manager, operation)}, events


def test_widget_lifecycle_spec_status_and_metadata(rig: AgentRig) -> None:
    ns, custom = rig.namespace, rig.custom

    def collect(write: Callable[[], object]) -> list[tuple[str, Operation]]:
        return write_and_collect(rig, "w1", write)

    created = collect(
        lambda: custom.create_namespaced_custom_object(
            GROUP, "v1", ns, WIDGETS, widget("w1", ns, rig.label, {"size": 1})
        )
    )
    one_change(created, OPERATOR_NAME, Operation.CREATE)
    first = events_for(rig, "w1")[0]
    assert first.key_id == "runtime-1:v1"
    assert first.event is not None
    assert first.event.watched_gvk == GroupVersionKind(group=GROUP, version="v1", kind="Widget")

    # spec change -> UPDATE via the main resource
    spec = collect(
        lambda: custom.patch_namespaced_custom_object(
            GROUP, "v1", ns, WIDGETS, "w1", {"spec": {"size": 2}}, _content_type=MERGE
        )
    )
    one_change(spec, OPERATOR_NAME, Operation.UPDATE)

    # metadata-only change of an object with a spec -> nothing (also when admission runs twice: a
    # patch applied to a stale copy differs from that copy in the metadata only, too)
    metadata = collect(
        lambda: custom.patch_namespaced_custom_object(
            GROUP,
            "v1",
            ns,
            WIDGETS,
            "w1",
            {"metadata": {"annotations": {"touched": "yes"}}},
            _content_type=MERGE,
        )
    )
    assert metadata == []

    # status change through the status subresource -> UPDATE for the status watcher's manager
    status = collect(
        lambda: custom.patch_namespaced_custom_object_status(
            GROUP, "v1", ns, WIDGETS, "w1", {"status": {"state": "Ready"}}, _content_type=MERGE
        )
    )
    one_change(status, "status-manager", Operation.UPDATE)

    # the same status again -> nothing; only an admission against a stale copy (without the status)
    # sees a change, and then it is that same status UPDATE
    again = collect(
        lambda: custom.patch_namespaced_custom_object_status(
            GROUP, "v1", ns, WIDGETS, "w1", {"status": {"state": "Ready"}}, _content_type=MERGE
        )
    )
    assert set(again) <= {("status-manager", Operation.UPDATE)}, again

    deleted = collect(lambda: custom.delete_namespaced_custom_object(GROUP, "v1", ns, WIDGETS, "w1"))
    one_change(deleted, OPERATOR_NAME, Operation.DELETE)


def test_configmap_without_spec_fires_on_every_real_change(rig: AgentRig) -> None:
    ns = rig.namespace
    labels = {WATCH_LABEL: rig.label}
    # One change at a time: the agent's send queue coalesces a pending UPDATE with a newer one for
    # the same object (by design), so back-to-back changes may arrive as one event.
    changes: list[tuple[Callable[[], object], Operation]] = [
        (
            lambda: rig.core.create_namespaced_config_map(
                ns, {"metadata": {"name": "cm1", "labels": labels}, "data": {"a": "1"}}
            ),
            Operation.CREATE,
        ),
        (lambda: rig.core.patch_namespaced_config_map("cm1", ns, {"data": {"a": "2"}}), Operation.UPDATE),
        (
            lambda: rig.core.patch_namespaced_config_map("cm1", ns, {"metadata": {"labels": {"extra": "x"}}}),
            Operation.UPDATE,
        ),
        (lambda: rig.core.delete_namespaced_config_map("cm1", ns), Operation.DELETE),
    ]
    for change, operation in changes:
        one_change(write_and_collect(rig, "cm1", change), OPERATOR_NAME, operation)
    assert all(
        r.event and r.event.watched_gvk == GroupVersionKind(group="", version="v1", kind="ConfigMap")
        for r in events_for(rig, "cm1")
    )


def test_owner_annotation_reaches_kcp(rig: AgentRig) -> None:
    metadata = {
        "name": "owned",
        "labels": {WATCH_LABEL: rig.label},
        "annotations": {OWNED_BY_ANNOTATION: f"{KCP_NAMESPACE}/kyma-1-serverless"},
    }
    rig.core.create_namespaced_config_map(rig.namespace, {"metadata": metadata})
    rig.receiver.wait_for(lambda: bool(events_for(rig, "owned")), what="owned event")
    event = events_for(rig, "owned")[0].event
    assert event is not None and event.owner == ObjectKey(namespace=KCP_NAMESPACE, name="kyma-1-serverless")


def test_objects_outside_the_selector_and_dry_runs_produce_no_events(rig: AgentRig) -> None:
    ns = rig.namespace
    dry_runs = rig.agent.metric("watcher_admission_decision_total", decision="dry_run")
    rig.core.create_namespaced_config_map(ns, {"metadata": {"name": "unwatched"}, "data": {"a": "1"}})
    rig.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "other-label", "labels": {WATCH_LABEL: "someone-else"}}}
    )
    rig.custom.create_namespaced_custom_object(
        GROUP, "v1", ns, WIDGETS, {**widget("unwatched-widget", ns, "nobody", {"a": 1})}
    )
    # a dry run of a watched object reaches the agent (sideEffects: NoneOnDryRun) but is not reported
    rig.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dry", "labels": {WATCH_LABEL: rig.label}}}, dry_run="All"
    )
    sentinel(rig)
    for name in ("unwatched", "other-label", "unwatched-widget", "dry"):
        assert events_for(rig, name) == [], name
    assert rig.agent.metric("watcher_admission_decision_total", decision="dry_run") >= dry_runs + 1


def test_start_up_resync_and_heartbeats(rig: AgentRig) -> None:
    resyncs = rig.receiver.events(lambda r: r.event is not None and r.event.operation is Operation.RESYNC)
    assert len(resyncs) == 1
    event = resyncs[0].event
    assert event is not None and event.watched == ObjectKey(namespace=SKR_NAMESPACE, name="default")
    assert event.watched_gvk == GroupVersionKind(
        group="operator.kyma-project.io", version="v1beta2", kind="Kyma"
    )
    rig.receiver.wait_for(lambda: len(rig.receiver.heartbeats()) >= 2, what="heartbeats")
    beat = rig.receiver.heartbeats()[0]
    assert beat.manager == OPERATOR_NAME and beat.key_id == "runtime-1:v1"
    assert rig.receiver.rejected == []


@pytest.mark.parametrize(
    ("content", "status"),
    [
        (b"", 400),
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', 400),
        (b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-1", "object": 7}}', 200),
        (b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-2", "operation": "CREATE"}}', 200),
    ],
)
def test_malformed_reviews_get_a_valid_answer_or_a_clear_400(
    rig: AgentRig, content: bytes, status: int
) -> None:
    response = httpx.post(
        f"{rig.agent.url}/validate/{OPERATOR_NAME}",
        content=content,
        headers={"content-type": "application/json"},
        verify=_ca_context(rig),
    )
    assert response.status_code == status
    if status == 200:
        review = response.json()
        assert review["response"]["allowed"] is True
        assert review["response"]["uid"] in ("u-1", "u-2")
    else:
        assert "malformed AdmissionReview" in response.json()["error"]
    assert httpx.get(f"http://127.0.0.1:{rig.agent.metrics_port}/healthz").status_code == 200


def test_oversized_review_is_refused(rig: AgentRig) -> None:
    response = httpx.post(
        f"{rig.agent.url}/validate/{OPERATOR_NAME}",
        content=b"x" * (8 * 1024 * 1024 + 1),
        verify=_ca_context(rig),
    )
    assert response.status_code == 413
    assert rig.agent.metric("watcher_admission_request_error_total", reason="too-large") >= 1


def _ca_context(rig: AgentRig) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=rig.pki.runtime_ca.cert_pem.decode())
