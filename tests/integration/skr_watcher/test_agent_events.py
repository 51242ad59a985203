"""The real SKR API server calls the agent; the stand-in KCP receives exactly the expected events."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Callable, Iterator

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


def test_widget_lifecycle_spec_status_and_metadata(rig: AgentRig) -> None:
    ns, custom = rig.namespace, rig.custom
    custom.create_namespaced_custom_object(GROUP, "v1", ns, WIDGETS, widget("w1", ns, rig.label, {"size": 1}))
    rig.receiver.wait_for(lambda: len(events_for(rig, "w1")) == 1, what="CREATE w1")
    (created,) = events_for(rig, "w1")
    assert created.manager == OPERATOR_NAME
    assert created.key_id == "runtime-1:v1"
    assert created.event is not None
    assert created.event.operation is Operation.CREATE
    assert created.event.watched_gvk == GroupVersionKind(group=GROUP, version="v1", kind="Widget")

    # spec change -> UPDATE via the main resource
    custom.patch_namespaced_custom_object(
        GROUP, "v1", ns, WIDGETS, "w1", {"spec": {"size": 2}}, _content_type=MERGE
    )
    rig.receiver.wait_for(lambda: len(events_for(rig, "w1")) == 2, what="UPDATE w1")
    assert events_for(rig, "w1")[1].event.operation is Operation.UPDATE  # type: ignore[union-attr]

    # metadata-only change of an object with a spec -> nothing
    custom.patch_namespaced_custom_object(
        GROUP, "v1", ns, WIDGETS, "w1", {"metadata": {"annotations": {"touched": "yes"}}}, _content_type=MERGE
    )
    # status change through the status subresource -> UPDATE for the status watcher's manager
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1", ns, WIDGETS, "w1", {"status": {"state": "Ready"}}, _content_type=MERGE
    )
    rig.receiver.wait_for(lambda: len(events_for(rig, "w1")) == 3, what="status UPDATE w1")
    status_event = events_for(rig, "w1")[2]
    assert status_event.manager == "status-manager"
    assert status_event.event is not None and status_event.event.operation is Operation.UPDATE
    # the same status again -> nothing
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1", ns, WIDGETS, "w1", {"status": {"state": "Ready"}}, _content_type=MERGE
    )
    custom.delete_namespaced_custom_object(GROUP, "v1", ns, WIDGETS, "w1")
    rig.receiver.wait_for(lambda: len(events_for(rig, "w1")) == 4, what="DELETE w1")
    sentinel(rig)
    operations = [(r.manager, r.event.operation) for r in events_for(rig, "w1") if r.event]
    assert operations == [
        (OPERATOR_NAME, Operation.CREATE),
        (OPERATOR_NAME, Operation.UPDATE),
        ("status-manager", Operation.UPDATE),
        (OPERATOR_NAME, Operation.DELETE),
    ]


def test_configmap_without_spec_fires_on_every_real_change(rig: AgentRig) -> None:
    ns = rig.namespace
    labels = {WATCH_LABEL: rig.label}
    # One change at a time: the agent's send queue coalesces a pending UPDATE with a newer one for
    # the same object (by design), so back-to-back changes may arrive as one event.
    changes: list[Callable[[], object]] = [
        lambda: rig.core.create_namespaced_config_map(
            ns, {"metadata": {"name": "cm1", "labels": labels}, "data": {"a": "1"}}
        ),
        lambda: rig.core.patch_namespaced_config_map("cm1", ns, {"data": {"a": "2"}}),
        lambda: rig.core.patch_namespaced_config_map("cm1", ns, {"metadata": {"labels": {"extra": "x"}}}),
        lambda: rig.core.delete_namespaced_config_map("cm1", ns),
    ]
    for count, change in enumerate(changes, start=1):
        change()

        def arrived(n: int = count) -> bool:
            return len(events_for(rig, "cm1")) == n

        rig.receiver.wait_for(arrived, what=f"cm1 event {count}")
    sentinel(rig)
    records = events_for(rig, "cm1")
    assert [r.event.operation for r in records if r.event] == [
        Operation.CREATE,
        Operation.UPDATE,
        Operation.UPDATE,
        Operation.DELETE,
    ]
    assert all(
        r.event and r.event.watched_gvk == GroupVersionKind(group="", version="v1", kind="ConfigMap")
        for r in records
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
