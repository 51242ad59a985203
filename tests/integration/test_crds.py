"""Our CRDs in a real API server: samples are accepted, defaults applied, status is a subresource,
and invalid objects are rejected with 422 and leave nothing behind."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from kyma_operator.api import (
    Gateway,
    KubeObject,
    Kyma,
    Manifest,
    ModuleReleaseMeta,
    ModuleRollout,
    ModuleRolloutPolicy,
    ModuleTemplate,
    VirtualService,
    Watcher,
    names,
)
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import crd_documents, install_crds, sample_documents

MODELS: dict[str, type[KubeObject]] = {
    model.RESOURCE.kind: model
    for model in (
        Kyma,
        Manifest,
        ModuleTemplate,
        ModuleReleaseMeta,
        Watcher,
        Gateway,
        VirtualService,
        ModuleRolloutPolicy,
        ModuleRollout,
    )
}
SAMPLES = {doc["kind"]: doc for _, doc in sample_documents()}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@pytest.fixture(scope="module")
def api(kcp_crds: APIServer) -> Iterator[kubernetes.client.ApiClient]:
    api_client = kubernetes.config.new_client_from_config(config_file=str(kcp_crds.kubeconfig_path))
    yield api_client
    api_client.close()


@pytest.fixture
def namespace(api: kubernetes.client.ApiClient, unique_name: str) -> Iterator[str]:
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": unique_name}})
    yield unique_name
    # Without a controller manager the namespace never finishes terminating; its objects are harmless.
    core.delete_namespace(unique_name)


def _sample(kind: str, namespace: str) -> dict[str, Any]:
    doc = copy.deepcopy(SAMPLES[kind])
    doc["metadata"]["namespace"] = namespace
    return doc


def _coordinates(doc: dict[str, Any]) -> tuple[str, str, str]:
    resource = MODELS[doc["kind"]].RESOURCE
    group, _, version = doc["apiVersion"].rpartition("/")
    return group, version, resource.plural


def _create(api: kubernetes.client.ApiClient, doc: dict[str, Any]) -> dict[str, Any]:
    group, version, plural = _coordinates(doc)
    created: dict[str, Any] = kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, doc["metadata"]["namespace"], plural, doc
    )
    return created


def _get(api: kubernetes.client.ApiClient, doc: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    group, sample_version, plural = _coordinates(doc)
    found: dict[str, Any] = kubernetes.client.CustomObjectsApi(api).get_namespaced_custom_object(
        group, version or sample_version, doc["metadata"]["namespace"], plural, doc["metadata"]["name"]
    )
    return found


def _status_code(call: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(kubernetes.client.ApiException) as raised:
        call()
    return raised.value.status, raised.value.body or ""


def test_installing_again_is_harmless_and_every_crd_is_established(api: kubernetes.client.ApiClient) -> None:
    expected = [doc["metadata"]["name"] for doc in crd_documents()]
    assert install_crds(api) == expected
    extensions = kubernetes.client.ApiextensionsV1Api(api)
    for name in expected:
        crd = extensions.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True"
    istio = extensions.read_custom_resource_definition(names.VIRTUAL_SERVICE.crd_name)
    assert {v.name for v in istio.spec.versions if v.served} == {"v1", "v1beta1", "v1alpha3"}
    assert istio.spec.conversion.strategy == "None"
    assert extensions.read_custom_resource_definition(
        names.MODULE_TEMPLATE.crd_name
    ).spec.names.short_names == ["mt"]


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_sample_is_accepted_and_reads_back_as_the_same_model(
    api: kubernetes.client.ApiClient, namespace: str, kind: str
) -> None:
    doc = _sample(kind, namespace)
    _create(api, doc)
    stored = _get(api, doc)
    model = MODELS[kind]
    written, read = model.from_object(doc), model.from_object(stored)
    # The model's defaults are the CRD's defaults: what the server added changes nothing.
    # (Model equality compares values, not which fields were present.)
    assert read.model_copy(update={"metadata": written.metadata}) == written
    assert read.metadata.labels == written.metadata.labels
    assert read.metadata.annotations == written.metadata.annotations
    assert read.metadata.uid and read.metadata.creation_timestamp is not None


def test_server_applies_the_crd_defaults(api: kubernetes.client.ApiClient, namespace: str) -> None:
    _create(api, _sample("Kyma", namespace))
    kyma = _get(api, _sample("Kyma", namespace))
    operator, keda = kyma["spec"]["modules"]
    assert operator == {
        "name": "template-operator",
        "customResourcePolicy": "CreateAndDelete",
        "managed": True,
    }
    assert keda["customResourcePolicy"] == "Ignore" and keda["managed"] is True

    manifest = _sample("Manifest", namespace)
    del manifest["spec"]["customResourcePolicy"]
    assert _create(api, manifest)["spec"]["customResourcePolicy"] == "CreateAndDelete"

    meta = _create(api, _sample("ModuleReleaseMeta", namespace))
    assert meta["spec"]["beta"] is False and meta["spec"]["internal"] is False


def _condition(condition_type: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": condition_type,
        "status": status,
        "reason": "Ready",
        "message": f"{condition_type} is fine",
        "lastTransitionTime": "2026-11-21T10:00:00Z",
    }


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("Kyma", {"state": "Ready", "activeChannel": "regular", "conditions": [_condition("Modules")]}),
        ("Manifest", {"state": "Ready", "conditions": [_condition("Installation")], "synced": []}),
        ("Watcher", {"state": "Ready", "conditions": [_condition("VirtualService")]}),
    ],
)
def test_status_is_a_subresource(
    api: kubernetes.client.ApiClient, namespace: str, kind: str, status: dict[str, Any]
) -> None:
    doc = _sample(kind, namespace)
    created = _create(api, {**doc, "status": status})
    assert "status" not in created, "status in the main resource is ignored on create"
    group, version, plural = _coordinates(doc)
    objects = kubernetes.client.CustomObjectsApi(api)
    objects.patch_namespaced_custom_object_status(
        group, version, namespace, plural, doc["metadata"]["name"], {"status": status}
    )
    stored = _get(api, doc)
    read = MODELS[kind].from_object(stored)
    assert read == MODELS[kind].from_object({**doc, "status": status}).model_copy(
        update={"metadata": read.metadata}
    )
    # Printer column State shows the status.
    table = objects.list_namespaced_custom_object(
        group, version, namespace, plural, _headers={"Accept": TABLE}
    )
    columns = [column["name"] for column in table["columnDefinitions"]]
    assert columns[:3] == ["Name", "State", "Age"]
    assert table["rows"][0]["cells"][1] == "Ready"


def test_module_template_has_no_status_subresource(api: kubernetes.client.ApiClient, namespace: str) -> None:
    doc = _sample("ModuleTemplate", namespace)
    _create(api, doc)
    group, version, plural = _coordinates(doc)
    status, _ = _status_code(
        lambda: kubernetes.client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            group, version, namespace, plural, doc["metadata"]["name"], {"status": {"state": "Ready"}}
        )
    )
    assert status == 404


def test_istio_kinds_are_served_in_v1_and_v1beta1(api: kubernetes.client.ApiClient, namespace: str) -> None:
    doc = _sample("VirtualService", namespace)
    doc["apiVersion"] = "networking.istio.io/v1"
    _create(api, doc)
    old = _get(api, doc, version="v1beta1")
    assert old["apiVersion"] == "networking.istio.io/v1beta1"
    assert VirtualService.from_object(old).spec == VirtualService.from_object(doc).spec


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    *parents, last = path.split(".")

    def mutate(doc: dict[str, Any]) -> None:
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


def _chain(*mutations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(doc)

    return mutate


_DELETE = object()

INVALID: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("channel with a digit", "Kyma", _set("spec.channel", "Regular1"), "spec.channel"),
    ("channel too short", "Kyma", _set("spec.channel", "ab"), "spec.channel"),
    ("channel too long", "Kyma", _set("spec.channel", "a" * 33), "spec.channel"),
    ("module channel", "Kyma", _set("spec.modules.1.channel", "Fast"), "spec.modules[1].channel"),
    ("missing channel", "Kyma", _set("spec.channel", _DELETE), "spec.channel"),
    (
        "unknown policy",
        "Kyma",
        _set("spec.modules.0.customResourcePolicy", "Sometimes"),
        "customResourcePolicy",
    ),
    (
        "module listed twice",
        "Kyma",
        _set("spec.modules", [{"name": "keda"}, {"name": "keda", "channel": "fast"}]),
        "Duplicate value",
    ),
    ("unknown field value", "Watcher", _set("spec.field", "metadata"), "spec.field"),
    ("port 0", "Watcher", _set("spec.serviceInfo.port", 0), "spec.serviceInfo.port"),
    ("port 70000", "Watcher", _set("spec.serviceInfo.port", 70000), "spec.serviceInfo.port"),
    ("missing serviceInfo", "Watcher", _set("spec.serviceInfo", _DELETE), "spec.serviceInfo"),
    ("missing gateway selector", "Watcher", _set("spec.gateway", {}), "spec.gateway.selector"),
    ("empty service name", "Watcher", _set("spec.serviceInfo.name", ""), "spec.serviceInfo.name"),
    (
        "channels and mandatory",
        "ModuleReleaseMeta",
        _set("spec.mandatory", {"version": "1.0.0"}),
        "exactly one of 'mandatory' or 'channels' must be specified",
    ),
    (
        "neither channels nor mandatory",
        "ModuleReleaseMeta",
        _set("spec.channels", _DELETE),
        "exactly one of 'mandatory' or 'channels' must be specified",
    ),
    (
        "channel listed twice",
        "ModuleReleaseMeta",
        _set(
            "spec.channels",
            [{"channel": "fast", "version": "1.0.0"}, {"channel": "fast", "version": "1.0.1"}],
        ),
        "Duplicate value",
    ),
    (
        "bad mandatory version",
        "ModuleReleaseMeta",
        _chain(_set("spec.channels", _DELETE), _set("spec.mandatory", {"version": "latest"})),
        "spec.mandatory.version",
    ),
    ("missing install", "Manifest", _set("spec.install", _DELETE), "spec.install"),
    ("template without descriptor", "ModuleTemplate", _set("spec.descriptor", _DELETE), "spec.descriptor"),
    ("bad template version", "ModuleTemplate", _set("spec.version", "v1"), "spec.version"),
    ("hosts is a string", "VirtualService", _set("spec.hosts", "listener.example.com"), "spec.hosts"),
    (
        "port number is a string",
        "VirtualService",
        _set("spec.http.0.route.0.destination.port.number", "http"),
        "spec.http[0].route[0].destination.port.number",
    ),
    (
        "prefix and exact",
        "VirtualService",
        _set("spec.http.0.match.0.uri", {"prefix": "/a", "exact": "/a"}),
        "spec.http[0].match[0].uri",
    ),
    (
        "gateway port is a string",
        "Gateway",
        _set("spec.servers.0.port.number", "https"),
        "spec.servers[0].port.number",
    ),
    ("unknown TLS mode", "Gateway", _set("spec.servers.0.tls.mode", "STRICT"), "spec.servers[0].tls.mode"),
    ("selector is a list", "Gateway", _set("spec.selector", ["istio"]), "spec.selector"),
    (
        "wave without selector or percentage",
        "ModuleRolloutPolicy",
        _set("spec.waves.1", {"name": "early"}),
        "exactly one of selector or upToPercent must be set",
    ),
    (
        "upToPercent not increasing",
        "ModuleRolloutPolicy",
        _set("spec.waves.2.upToPercent", 10),
        "upToPercent must increase from wave to wave",
    ),
    (
        "last wave not 100",
        "ModuleRolloutPolicy",
        _set("spec.waves.3.upToPercent", 90),
        "the last wave must have upToPercent: 100",
    ),
    ("duplicate wave names", "ModuleRolloutPolicy", _set("spec.waves.2.name", "early"), "Duplicate value"),
    (
        "selector wave after a percentage wave",
        "ModuleRolloutPolicy",
        lambda doc: doc["spec"]["waves"].insert(0, doc["spec"]["waves"].pop(1)),
        "selector waves must come before percentage waves",
    ),
    (
        "revertScope without Revert",
        "ModuleRolloutPolicy",
        _set("spec.onFailure", "Halt"),
        "revertScope needs onFailure: Revert",
    ),
    (
        "bad duration",
        "ModuleRolloutPolicy",
        _set("spec.waves.0.progressDeadline", "10 minutes"),
        "spec.waves[0].progressDeadline",
    ),
    (
        "failure budget over 100%",
        "ModuleRolloutPolicy",
        _set("spec.waves.1.maxFailures", "200%"),
        "spec.waves[1].maxFailures",
    ),
    ("zero concurrency", "ModuleRolloutPolicy", _set("spec.waves.3.maxConcurrency", 0), "maxConcurrency"),
    ("negative budget", "ModuleRolloutPolicy", _set("spec.waves.1.maxFailures", -1), "must not be negative"),
    (
        "frozen policy without waves",
        "ModuleRollout",
        _set("spec.policy.waves", []),
        "spec.policy.waves",
    ),
    ("unknown run state", "ModuleRollout", _set("spec.state", "Stopped"), "spec.state"),
]


@pytest.mark.parametrize(("case", "kind", "mutate", "message"), INVALID, ids=[case[0] for case in INVALID])
def test_invalid_object_is_rejected_and_not_stored(
    api: kubernetes.client.ApiClient,
    namespace: str,
    case: str,
    kind: str,
    mutate: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    doc = _sample(kind, namespace)
    mutate(doc)
    status, body = _status_code(lambda: _create(api, doc))
    assert status == 422, body
    assert message in json.loads(body)["message"]
    assert _status_code(lambda: _get(api, doc))[0] == 404


@pytest.mark.parametrize(
    ("kind", "status", "message"),
    [
        ("Kyma", {"state": "Sleeping"}, "status.state"),
        ("Kyma", {"conditions": [_condition("Modules", status="Maybe")]}, "status.conditions[0].status"),
        ("Kyma", {"conditions": [_condition("Modules"), _condition("Modules")]}, "Duplicate value"),
        ("Watcher", {"conditions": [_condition("VirtualService")]}, "status.state"),
        ("Manifest", {"state": "Ready", "synced": [{"group": "apps"}]}, "status.synced[0].kind"),
    ],
)
def test_invalid_status_is_rejected(
    api: kubernetes.client.ApiClient, namespace: str, kind: str, status: dict[str, Any], message: str
) -> None:
    doc = _sample(kind, namespace)
    _create(api, doc)
    group, version, plural = _coordinates(doc)
    code, body = _status_code(
        lambda: kubernetes.client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            group, version, namespace, plural, doc["metadata"]["name"], {"status": status}
        )
    )
    assert code == 422, body
    assert message in json.loads(body)["message"]
    assert "status" not in _get(api, doc)


def test_unknown_policy_field_is_rejected_under_strict_field_validation(
    api: kubernetes.client.ApiClient, namespace: str
) -> None:
    doc = _sample("ModuleRolloutPolicy", namespace)
    doc["spec"]["waves"][1]["maxSurge"] = 3
    group, version, plural = _coordinates(doc)
    objects = kubernetes.client.CustomObjectsApi(api)
    status, body = _status_code(
        lambda: objects.create_namespaced_custom_object(
            group, version, namespace, plural, doc, field_validation="Strict"
        )
    )
    assert status == 400 and 'unknown field "spec.waves[1].maxSurge"' in json.loads(body)["message"], body
    assert _status_code(lambda: _get(api, doc))[0] == 404


def test_rollout_spec_is_immutable_except_the_operators_intent(
    api: kubernetes.client.ApiClient, namespace: str
) -> None:
    doc = _sample("ModuleRollout", namespace)
    _create(api, doc)
    group, version, plural = _coordinates(doc)
    objects = kubernetes.client.CustomObjectsApi(api)
    name = doc["metadata"]["name"]

    def patch(spec: dict[str, Any]) -> dict[str, Any]:
        patched: dict[str, Any] = objects.patch_namespaced_custom_object(
            group, version, namespace, plural, name, {"spec": spec}
        )
        return patched

    for change in ({"toVersion": "9.9.9"}, {"policyRef": "other"}, {"policy": {"onFailure": "Halt"}}):
        status, body = _status_code(lambda change=change: patch(change))  # type: ignore[misc]
        assert status == 422 and "is immutable" in json.loads(body)["message"], body
    assert (
        patch({"state": "Paused", "ignoredKymas": ["kyma-1"], "approvedWaves": ["half"]})["spec"]["state"]
        == "Paused"
    )
    assert patch({"state": "Aborted"})["spec"]["state"] == "Aborted"
    status, body = _status_code(lambda: patch({"state": "Running"}))
    assert status == 422 and "an Aborted rollout cannot be resumed" in json.loads(body)["message"], body
    stored = ModuleRollout.from_object(_get(api, doc))
    assert (stored.spec.to_version, stored.spec.state) == ("1.0.1", "Aborted")
