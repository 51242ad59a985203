"""Change detection (DESIGN 4.1) and AdmissionReview parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kyma_wire.events import GroupVersionKind, ObjectKey, Operation
from kyma_wire.names import KCP_NAMESPACE, OWNED_BY_ANNOTATION
from skr_watcher.admission import (
    Decision,
    MalformedReview,
    Outcome,
    allowed_response,
    decide,
    parse_review,
)
from tests.unit.skr_watcher.fakes import WALL_START, body, obj, review


def run(document: dict[str, Any]) -> Outcome:
    return decide(parse_review(body(document)).request, WALL_START)


def test_create_fires_with_gvk_from_the_object() -> None:
    outcome = run(review("CREATE", new=obj("kyma-1", KCP_NAMESPACE, spec={"channel": "regular"})))
    assert outcome.decision is Decision.CHANGED
    event = outcome.event
    assert event is not None
    assert event.watched == ObjectKey(namespace=KCP_NAMESPACE, name="kyma-1")
    assert event.watched_gvk == GroupVersionKind(
        group="operator.kyma-project.io", version="v1beta2", kind="Kyma"
    )
    assert event.operation is Operation.CREATE
    assert event.observed_at == WALL_START
    assert event.owner is None


def test_core_group_object_has_empty_group() -> None:
    outcome = run(review("CREATE", new=obj("cm", api_version="v1", kind="ConfigMap", extra={"data": {}})))
    assert outcome.event is not None
    assert outcome.event.watched_gvk == GroupVersionKind(group="", version="v1", kind="ConfigMap")


def test_delete_fires_with_the_old_object() -> None:
    outcome = run(review("DELETE", old=obj("gone", "ns1", spec={"a": 1})))
    assert outcome.decision is Decision.CHANGED
    assert outcome.event is not None
    assert outcome.event.operation is Operation.DELETE
    assert outcome.event.watched == ObjectKey(namespace="ns1", name="gone")


def test_delete_without_old_object_falls_back_to_request_identity() -> None:
    document = review("DELETE", old=obj("gone", "ns1"))
    document["request"]["oldObject"] = None
    outcome = run(document)
    assert outcome.event is not None
    assert outcome.event.watched == ObjectKey(namespace="ns1", name="gone")
    assert outcome.event.watched_gvk.kind == "Kyma"


@pytest.mark.parametrize(
    ("old_spec", "new_spec", "decision"),
    [
        ({"channel": "regular"}, {"channel": "fast"}, Decision.CHANGED),
        ({"channel": "regular"}, {"channel": "regular"}, Decision.UNCHANGED),
        (
            {"modules": [{"name": "a"}, {"name": "b"}]},
            {"modules": [{"name": "b"}, {"name": "a"}]},
            Decision.CHANGED,
        ),
        ({"n": 1}, {"n": 1.0}, Decision.UNCHANGED),  # JSON numbers compare by value, like Go's float64
        ({}, {"x": None}, Decision.CHANGED),
    ],
)
def test_update_main_resource_compares_spec(old_spec: Any, new_spec: Any, decision: Decision) -> None:
    old = obj(spec=old_spec, status={"state": "Ready"})
    new = obj(spec=new_spec, status={"state": "Error"}, resource_version="2")
    assert run(review("UPDATE", new=new, old=old)).decision is decision


def test_update_with_only_metadata_or_status_changed_on_main_resource_is_unchanged() -> None:
    old = obj(spec={"channel": "regular"}, labels={"a": "1"}, status={"state": "Ready"})
    new = obj(spec={"channel": "regular"}, labels={"a": "2"}, status={"state": "Error"})
    assert run(review("UPDATE", new=new, old=old)).decision is Decision.UNCHANGED


def test_update_without_spec_fires_on_any_real_change() -> None:
    old = obj("cm", api_version="v1", kind="ConfigMap", extra={"data": {"k": "1"}})
    changed_data = obj("cm", api_version="v1", kind="ConfigMap", extra={"data": {"k": "2"}})
    changed_label = obj(
        "cm", api_version="v1", kind="ConfigMap", extra={"data": {"k": "1"}}, labels={"x": "y"}
    )
    assert run(review("UPDATE", new=changed_data, old=old)).decision is Decision.CHANGED
    assert run(review("UPDATE", new=changed_label, old=old)).decision is Decision.CHANGED


def test_update_without_spec_ignores_bookkeeping_metadata() -> None:
    old = obj("cm", api_version="v1", kind="ConfigMap", extra={"data": {"k": "1"}})
    new = obj("cm", api_version="v1", kind="ConfigMap", extra={"data": {"k": "1"}}, resource_version="9")
    new["metadata"]["managedFields"] = [{"manager": "kubectl", "time": "2026-11-21T10:00:00Z"}]
    assert run(review("UPDATE", new=new, old=old)).decision is Decision.UNCHANGED


def test_update_where_only_one_side_has_a_spec_fires() -> None:
    old = obj(spec=None, extra={"data": 1})
    new = obj(spec={"a": 1}, extra={"data": 1})
    assert run(review("UPDATE", new=new, old=old)).decision is Decision.CHANGED


@pytest.mark.parametrize("sub_resource", ["status", "STATUS"])
def test_update_status_subresource_compares_status(sub_resource: str) -> None:
    old = obj(spec={"channel": "regular"}, status={"state": "Ready"})
    same = obj(spec={"channel": "fast"}, status={"state": "Ready"})
    different = obj(spec={"channel": "regular"}, status={"state": "Error"})
    assert run(review("UPDATE", new=same, old=old, sub_resource=sub_resource)).decision is Decision.UNCHANGED
    outcome = run(review("UPDATE", new=different, old=old, sub_resource=sub_resource))
    assert outcome.decision is Decision.CHANGED
    assert outcome.event is not None and outcome.event.operation is Operation.UPDATE


def test_status_appearing_counts_as_change() -> None:
    old = obj(spec={"a": 1})
    new = obj(spec={"a": 1}, status={"state": "Processing"})
    assert run(review("UPDATE", new=new, old=old, sub_resource="status")).decision is Decision.CHANGED


def test_other_subresources_produce_no_event() -> None:
    outcome = run(review("UPDATE", new=obj(spec={"r": 2}), old=obj(spec={"r": 1}), sub_resource="scale"))
    assert outcome == Outcome(Decision.UNSUPPORTED_SUBRESOURCE, reason="invalid-subresource")


def test_connect_produces_no_event() -> None:
    outcome = run(review("CONNECT", new=obj()))
    assert outcome == Outcome(Decision.UNSUPPORTED_OPERATION, reason="unsupported-operation")


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_dry_run_never_fires(operation: str) -> None:
    outcome = run(review(operation, new=obj(spec={"a": 2}), old=obj(spec={"a": 1}), dry_run=True))
    assert outcome == Outcome(Decision.DRY_RUN)


def test_owner_annotation_becomes_the_event_owner() -> None:
    annotations = {OWNED_BY_ANNOTATION: f"{KCP_NAMESPACE}/kyma-1-istio-abc"}
    outcome = run(review("CREATE", new=obj("istio", annotations=annotations, spec={})))
    assert outcome.event is not None
    assert outcome.event.owner == ObjectKey(namespace=KCP_NAMESPACE, name="kyma-1-istio-abc")


def test_owner_of_a_deleted_object_comes_from_the_old_object() -> None:
    annotations = {OWNED_BY_ANNOTATION: f"{KCP_NAMESPACE}/m1"}
    outcome = run(review("DELETE", old=obj("x", annotations=annotations)))
    assert outcome.event is not None and outcome.event.owner == ObjectKey(namespace=KCP_NAMESPACE, name="m1")


@pytest.mark.parametrize("value", ["", "a/b/c", f"{KCP_NAMESPACE}/", "  "])
def test_unusable_owner_annotation_is_ignored(value: str) -> None:
    outcome = run(review("CREATE", new=obj(annotations={OWNED_BY_ANNOTATION: value})))
    assert outcome.decision is Decision.CHANGED
    assert outcome.event is not None and outcome.event.owner is None


def test_cluster_scoped_object_has_empty_namespace() -> None:
    outcome = run(
        review(
            "CREATE",
            new=obj("crd-x", "", api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"),
        )
    )
    assert outcome.event is not None
    assert outcome.event.watched == ObjectKey(namespace="", name="crd-x")


def test_update_missing_objects_is_invalid() -> None:
    document = review("UPDATE", new=obj(spec={"a": 1}), old=obj(spec={"a": 2}))
    document["request"]["oldObject"] = None
    assert run(document) == Outcome(Decision.INVALID, reason="missing-object")


def test_create_without_a_name_is_invalid() -> None:
    document = review("CREATE", new=obj(""))
    document["request"]["name"] = ""
    assert run(document) == Outcome(Decision.INVALID, reason="missing-name")


def test_object_without_kind_uses_the_request_kind() -> None:
    new = obj("x")
    del new["apiVersion"], new["kind"]
    document = review("CREATE", new=new)
    document["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    outcome = run(document)
    assert outcome.event is not None
    assert outcome.event.watched_gvk == GroupVersionKind(group="apps", version="v1", kind="Deployment")


def test_object_with_wrongly_typed_metadata_is_invalid_not_a_crash() -> None:
    document = review("CREATE", new={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 5}})
    document["request"]["name"] = "x"
    assert run(document) == Outcome(Decision.INVALID, reason="invalid-object")


def test_event_wire_body_is_a_superset_of_upstream() -> None:
    outcome = run(review("UPDATE", new=obj(spec={"a": 2}), old=obj(spec={"a": 1})))
    assert outcome.event is not None
    wire = json.loads(outcome.event.to_wire())
    assert wire["watched"] == {"namespace": "default", "name": "sample"}
    assert wire["watchedGvk"] == {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"}
    assert wire["operation"] == "UPDATE"


@pytest.mark.parametrize(
    ("raw", "reason", "uid"),
    [
        (b"not json", "invalid-json", None),
        (b"[]", "invalid-review", None),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "invalid-review", None),
        (b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": ""}}', "invalid-review", None),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-1", "object": "nope"}}',
            "invalid-review",
            "u-1",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-2", "dryRun": "maybe"}}',
            "invalid-review",
            "u-2",
        ),
        (b'{"request": {"uid": "u-3"}}', "invalid-review", "u-3"),
    ],
)
def test_malformed_reviews_raise_with_salvaged_uid(raw: bytes, reason: str, uid: str | None) -> None:
    with pytest.raises(MalformedReview) as info:
        parse_review(raw)
    assert info.value.reason == reason
    assert info.value.uid == uid
    assert reason in str(info.value)


def test_allowed_response_echoes_uid_and_api_version() -> None:
    document = json.loads(allowed_response("abc", "admission.k8s.io/v1"))
    assert document == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc", "allowed": True},
    }
    assert json.loads(allowed_response("abc", "something/else"))["apiVersion"] == "admission.k8s.io/v1"


@pytest.mark.parametrize(
    ("uid", "api_version"),
    [
        ("705ab4f5-6393-11e8-b7cc-42010a800002", "admission.k8s.io/v1"),
        ('q"\\\n\x00\x1f\u00e9\U0001f600\u2028</script>', 'admission.k8s.io/v1"}, "allowed": false, "x": "'),
        ("u", None),
        ("u", "admission.k8s.io/v1beta1"),
        ("u", ""),
    ],
)
def test_the_answer_template_gives_the_bytes_json_dumps_gives(uid: str, api_version: str | None) -> None:
    """Hostile uids and apiVersions included (quotes, escapes, control and non-ASCII characters):
    encoded as ``json.dumps`` encodes the whole document, so nothing can break out of a string."""
    version = api_version if api_version and api_version.startswith("admission.k8s.io/") else None
    document = {
        "apiVersion": version or "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": True},
    }
    assert allowed_response(uid, api_version) == json.dumps(document, separators=(",", ":")).encode()
    assert json.loads(allowed_response(uid, api_version))["response"] == {"uid": uid, "allowed": True}


def test_events_of_one_kind_share_one_gvk_and_the_sharing_is_bounded() -> None:
    from skr_watcher import admission

    first = run(review("CREATE", new=obj("a"))).event
    second = run(review("CREATE", new=obj("b", "other"))).event
    assert first is not None and second is not None
    assert first.watched_gvk is second.watched_gvk  # one instance per kind, not one per queued event
    assert first.watched_gvk == GroupVersionKind(
        group="operator.kyma-project.io", version="v1beta2", kind="Kyma"
    )
    for i in range(admission._GVK_CACHE_SIZE + 10):
        event = run(review("CREATE", new=obj(kind=f"Kind{i}"))).event
        assert event is not None and event.watched_gvk.kind == f"Kind{i}"
        assert len(admission._gvks) <= admission._GVK_CACHE_SIZE
    invalid = run(review("CREATE", new=obj(kind="K" * 64)))  # longer than a kind may be
    assert invalid.decision is Decision.INVALID and invalid.reason == "missing-kind"
