"""Every sample in manifests/samples parses into its model and is written back unchanged."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

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
from kyma_operator.api.kyma import CustomResourcePolicy
from kyma_operator.api.watcher import FieldName, default_gateway_selector
from kyma_operator.controllers.watcher.virtualservice import render
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME
from tests.controlplane.crds import sample_documents

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
SAMPLES = list(sample_documents())


def _by_kind(kind: str) -> dict[str, Any]:
    return next(doc for _, doc in SAMPLES if doc["kind"] == kind)


def test_there_is_a_sample_of_every_kind() -> None:
    assert sorted(doc["kind"] for _, doc in SAMPLES) == sorted(MODELS)


@pytest.mark.parametrize(("path", "doc"), SAMPLES, ids=[path.name for path, _ in SAMPLES])
def test_sample_round_trips_unchanged(path: Path, doc: dict[str, Any]) -> None:
    original = copy.deepcopy(doc)
    model = MODELS[doc["kind"]].from_object(doc)
    assert model.to_object() == original
    assert doc == original, "parsing must not modify its input"
    assert MODELS[doc["kind"]].from_object(model.to_object()) == model


def test_kyma_sample() -> None:
    kyma = Kyma.from_object(_by_kind("Kyma"))
    assert kyma.runtime_id() == kyma.name
    assert kyma.namespace == names.KCP_NAMESPACE
    assert kyma.annotations[names.SKR_DOMAIN_ANNOTATION]
    assert [m.name for m in kyma.spec.modules] == ["template-operator", "keda"]
    operator, keda = kyma.spec.modules
    # Defaults the API server would fill in are the model's defaults too.
    assert operator.custom_resource_policy is CustomResourcePolicy.CREATE_AND_DELETE
    assert operator.managed is True
    assert keda.custom_resource_policy is CustomResourcePolicy.IGNORE
    assert kyma.desired_channel(operator) == "regular"
    assert kyma.desired_channel(keda) == "fast"


def test_manifest_sample() -> None:
    manifest = Manifest.from_object(_by_kind("Manifest"))
    kyma = Kyma.from_object(_by_kind("Kyma"))
    assert manifest.kyma_name() == kyma.name
    assert manifest.module_name() == "template-operator"
    assert manifest.channel() == "regular"
    assert len(manifest.name) <= 62
    assert manifest.spec.install.source.type == "oci-dir" and manifest.spec.remote is False  # as upstream
    assert manifest.spec.resource is not None and manifest.spec.resource["kind"] == "Sample"


def test_template_and_release_meta_samples_resolve() -> None:
    meta = ModuleReleaseMeta.from_object(_by_kind("ModuleReleaseMeta"))
    template = ModuleTemplate.from_object(_by_kind("ModuleTemplate"))
    version = meta.version_for("regular")
    assert f"{meta.spec.module_name}-{version}" == template.name
    assert template.spec.version == version
    assert template.ocm_component_name() == meta.spec.ocm_component_name


def test_watcher_sample_is_the_upstream_default() -> None:
    watcher = Watcher.from_object(_by_kind("Watcher"))
    assert (watcher.name, watcher.namespace) == ("klm-watcher", KCP_NAMESPACE)
    assert watcher.manager_name() == OPERATOR_NAME
    assert watcher.spec.field is FieldName.SPEC
    assert watcher.spec.labels_to_watch == {names.WATCHED_BY_LABEL: names.MANAGED_BY_KYMA}
    assert watcher.spec.resource_to_watch.resource == "kymas"
    assert watcher.spec.gateway.selector == default_gateway_selector()
    assert (
        watcher.spec.service_info.host() == f"klm-controller-manager-events.{KCP_NAMESPACE}.svc.cluster.local"
    )


def test_gateway_and_virtual_service_samples_fit_together() -> None:
    gateway = Gateway.from_object(_by_kind("Gateway"))
    service = VirtualService.from_object(_by_kind("VirtualService"))
    watcher = Watcher.from_object(_by_kind("Watcher"))
    assert watcher.spec.gateway.selector.matches(gateway.labels)
    assert service.spec.gateways == [gateway.reference()]
    assert service.spec.hosts == gateway.hosts()
    (route,) = service.spec.http
    assert route.name == f"{watcher.namespace}/{watcher.name}"
    assert route.match[0].uri is not None
    assert route.match[0].uri.prefix == f"/v2/{watcher.manager_name()}/"
    destination = route.route[0].destination
    assert destination.host == watcher.spec.service_info.host()
    assert destination.port is not None and destination.port.number == watcher.spec.service_info.port
    (server,) = gateway.spec.servers
    assert server.tls is not None and server.tls.mode == "MUTUAL"


def test_virtual_service_sample_is_what_the_controller_renders() -> None:
    sample = _by_kind("VirtualService")
    watcher_doc = copy.deepcopy(_by_kind("Watcher"))
    # The API server assigns the Watcher's uid; the sample carries it as a placeholder.
    watcher_doc["metadata"]["uid"] = sample["metadata"]["ownerReferences"][0]["uid"]
    rendered = render(
        Watcher.from_object(watcher_doc), [Gateway.from_object(_by_kind("Gateway"))], namespace=KCP_NAMESPACE
    )
    assert rendered.to_object() == sample
