"""Shared model behaviour: label selectors, conditions, timestamps, output rules, type checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from kyma_operator.api import Gateway, InvalidObjectError, Kyma, Watcher
from kyma_operator.api.kyma import KymaSpec, Module
from kyma_operator.api.meta import (
    Condition,
    ConditionStatus,
    KubeModel,
    LabelSelector,
    LabelSelectorRequirement,
    ObjectMeta,
    find_condition,
    format_time,
    optional_fields,
    set_condition,
)

LABELS = {"app": "web", "tier": "frontend", "env": "prod"}


def _selector(**kwargs: object) -> LabelSelector:
    return LabelSelector.model_validate(kwargs)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, True),
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "web", "env": "dev"}}, False),
        ({"matchLabels": {"missing": ""}}, False),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "staging"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}, False),
        ({"matchExpressions": [{"key": "missing", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}, True),
        ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, False),
        ({"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "missing", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod"]},
                    {"key": "tier", "operator": "Exists"},
                ],
            },
            True,
        ),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod"]},
                    {"key": "canary", "operator": "Exists"},
                ],
            },
            False,
        ),
    ],
)
def test_label_selector_matches(selector: dict[str, object], expected: bool) -> None:
    assert _selector(**selector).matches(LABELS) is expected


def test_label_selector_query_syntax() -> None:
    selector = _selector(
        matchLabels={"b": "2", "a": "1"},
        matchExpressions=[
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "zone", "operator": "NotIn", "values": ["x"]},
            {"key": "tier", "operator": "Exists"},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    )
    assert selector.to_query() == "a=1,b=2,env in (dev,prod),zone notin (x),tier,!canary"
    assert LabelSelector().to_query() == ""


@pytest.mark.parametrize(
    "requirement",
    [
        {"key": "k", "operator": "In"},
        {"key": "k", "operator": "NotIn", "values": []},
        {"key": "k", "operator": "Exists", "values": ["v"]},
        {"key": "k", "operator": "DoesNotExist", "values": ["v"]},
        {"key": "k", "operator": "Equals", "values": ["v"]},
    ],
)
def test_invalid_label_selector_requirements_are_rejected(requirement: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        LabelSelectorRequirement.model_validate(requirement)


def _condition(status: ConditionStatus, at: datetime, message: str = "m") -> Condition:
    return Condition(type="Modules", status=status, reason="Ready", message=message, last_transition_time=at)


def test_set_condition_keeps_transition_time_while_status_is_unchanged() -> None:
    t0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
    conditions: list[Condition] = []
    assert set_condition(conditions, _condition(ConditionStatus.UNKNOWN, t0)) is True
    assert set_condition(conditions, _condition(ConditionStatus.UNKNOWN, t0 + timedelta(minutes=1))) is False
    assert set_condition(conditions, _condition(ConditionStatus.UNKNOWN, t0 + timedelta(minutes=2), "new"))
    current = find_condition(conditions, "Modules")
    assert current is not None and current.message == "new" and current.last_transition_time == t0
    t3 = t0 + timedelta(minutes=3)
    assert set_condition(conditions, _condition(ConditionStatus.TRUE, t3)) is True
    assert len(conditions) == 1
    assert conditions[0].status is ConditionStatus.TRUE and conditions[0].last_transition_time == t3
    assert find_condition(conditions, "Other") is None


def test_times_are_written_as_utc_seconds() -> None:
    local = datetime(2026, 11, 21, 12, 0, 5, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(local) == "2026-11-21T10:00:05Z"
    condition = _condition(ConditionStatus.TRUE, local)
    assert condition.model_dump(mode="json", by_alias=True)["lastTransitionTime"] == "2026-11-21T10:00:05Z"
    parsed = Condition.model_validate(condition.model_dump(mode="json", by_alias=True))
    assert parsed.last_transition_time == datetime(2026, 11, 21, 10, 0, 5, tzinfo=UTC)


def test_naive_times_are_rejected() -> None:
    with pytest.raises(ValidationError):
        Condition.model_validate(
            {
                "type": "A",
                "status": "True",
                "reason": "R",
                "message": "",
                "lastTransitionTime": "2026-11-21T10:00:00",
            }
        )


def test_models_built_in_code_write_only_what_was_set() -> None:
    kyma = Kyma(metadata=ObjectMeta(name="k", namespace="ns"), spec=KymaSpec(channel="regular"))
    kyma.spec.modules.append(Module(name="serverless"))
    assert kyma.to_object() == {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": "k", "namespace": "ns"},
        "spec": {"channel": "regular", "modules": [{"name": "serverless"}]},
    }
    # Changing a defaulted collection in place is still written.
    kyma.metadata.labels["a"] = "b"
    kyma.spec.modules[0].managed = False
    written = kyma.to_object()
    assert written["metadata"]["labels"] == {"a": "b"}
    assert written["spec"]["modules"] == [{"name": "serverless", "managed": False}]


def _models(base: type[KubeModel]) -> list[type[KubeModel]]:
    found = []
    for sub in base.__subclasses__():
        found += [sub, *_models(sub)]
    return found


def test_the_cached_defaults_are_pydantic_s_for_every_model() -> None:
    """``optional_fields`` (computed once per class) against pydantic's own answer, asked afresh,
    for every model of the operator (every kind's module is imported by ``kyma_operator.api``)."""
    models = _models(KubeModel)
    assert len(models) > 40 and Kyma in models and ObjectMeta in models
    for model in models:
        plain = [
            (name, field.alias or name, field.get_default(call_default_factory=True))
            for name, field in model.model_fields.items()
            if not field.is_required()
        ]
        assert list(optional_fields(model)) == plain, model.__name__


def test_the_cached_defaults_are_never_handed_out() -> None:
    """A defaulted collection changed in place on one object does not change the cached default the
    next object is compared against."""
    first = Kyma(metadata=ObjectMeta(name="a", namespace="ns"), spec=KymaSpec(channel="regular"))
    first.metadata.labels["x"] = "y"
    first.spec.modules.append(Module(name="serverless"))
    assert first.to_object()["metadata"]["labels"] == {"x": "y"}
    second = Kyma(metadata=ObjectMeta(name="b", namespace="ns"), spec=KymaSpec(channel="regular"))
    assert second.to_object()["metadata"] == {"name": "b", "namespace": "ns"}
    assert second.to_object()["spec"] == {"channel": "regular"}
    assert {name: default for name, _, default in optional_fields(ObjectMeta)}["labels"] == {}


def test_python_names_are_accepted_on_input() -> None:
    module = Module.model_validate({"name": "m", "custom_resource_policy": "Ignore"})
    assert module.model_dump(mode="json", by_alias=True) == {"name": "m", "customResourcePolicy": "Ignore"}


def test_unknown_fields_from_the_api_server_are_kept() -> None:
    obj = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {
            "name": "k",
            "namespace": "ns",
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            "creationTimestamp": "2026-11-21T10:00:00Z",
        },
        "spec": {"channel": "fast", "futureField": {"x": 1}, "modules": [{"name": "m", "extra": True}]},
        "status": {"state": "Ready", "newStatusField": "y"},
    }
    kyma = Kyma.from_object(obj)
    assert kyma.metadata.creation_timestamp == datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
    assert kyma.to_object() == obj


def test_object_without_type_meta_gets_it() -> None:
    kyma = Kyma.from_object({"metadata": {"name": "k"}, "spec": {"channel": "regular"}})
    assert kyma.to_object()["apiVersion"] == "operator.kyma-project.io/v1beta2"
    assert kyma.to_object()["kind"] == "Kyma"


@pytest.mark.parametrize(
    ("api_version", "kind", "problem"),
    [
        ("operator.kyma-project.io/v1beta2", "Manifest", "kind"),
        ("operator.kyma-project.io/v1beta1", "Kyma", "apiVersion"),
        ("example.com/v1beta2", "Kyma", "apiVersion"),
    ],
)
def test_wrong_type_meta_is_a_clear_error(api_version: str, kind: str, problem: str) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "k", "namespace": "ns"}}
    obj["spec"] = {"channel": "regular"}
    with pytest.raises(InvalidObjectError, match=rf"invalid Kyma ns/k: .*{problem}"):
        Kyma.from_object(obj)


def test_missing_required_fields_name_the_field() -> None:
    obj = {"apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Watcher", "metadata": {"name": "w"}}
    obj["spec"] = {"field": "spec", "gateway": {"selector": {}}, "resourceToWatch": {}}
    with pytest.raises(InvalidObjectError) as error:
        Watcher.from_object(obj)
    message = str(error.value)
    assert "serviceInfo" in message and "resourceToWatch.group" in message


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha3"])
def test_istio_objects_are_accepted_in_every_served_version(version: str) -> None:
    gateway = Gateway.from_object({"apiVersion": f"networking.istio.io/{version}", "kind": "Gateway"})
    assert gateway.api_version.endswith(version)
