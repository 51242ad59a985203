"""manifests/kcp: the shipped Watchers, Gateway and Service parse, validate and fit together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.istio import Gateway
from kyma_operator.api.watcher import Watcher
from kyma_operator.api.watcher_validation import validate_watcher
from kyma_operator.controllers.watcher.virtualservice import render
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME

KCP_DIR = Path(__file__).resolve().parents[5] / "manifests" / "kcp"


def _documents() -> list[dict[str, Any]]:
    (kustomization,) = yaml.safe_load_all((KCP_DIR / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs.extend(d for d in yaml.safe_load_all((KCP_DIR / name).read_text()) if d)
    return docs


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _documents() if d["kind"] == kind]


def test_every_file_is_listed_in_the_kustomization() -> None:
    (kustomization,) = yaml.safe_load_all((KCP_DIR / "kustomization.yaml").read_text())
    on_disk = {p.name for p in KCP_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk


def test_default_watchers_are_valid_and_match_upstream() -> None:
    watchers = {d["metadata"]["name"]: Watcher.from_object(d) for d in _of_kind("Watcher")}
    assert set(watchers) == {
        "klm-watcher",
        "klm-module-watcher",
        "klm-module-deployments",
        "klm-module-statefulsets",
    }
    for watcher in watchers.values():
        assert validate_watcher(watcher) == []
        assert watcher.namespace == names.KCP_NAMESPACE
        assert watcher.manager_name() == OPERATOR_NAME  # upstream manager_config_test
    kyma = watchers["klm-watcher"].spec
    assert kyma.labels_to_watch == {names.WATCHED_BY_LABEL: "kyma"}
    assert (
        kyma.resource_to_watch.group,
        kyma.resource_to_watch.version,
        kyma.resource_to_watch.resource,
    ) == (
        "operator.kyma-project.io",
        "*",
        "kymas",
    )
    assert kyma.field == "spec"
    modules = watchers["klm-module-watcher"].spec
    assert modules.labels_to_watch == {names.MANAGED_BY_LABEL: names.MANAGED_BY_KYMA}
    assert (modules.resource_to_watch.group, modules.resource_to_watch.resource) == ("*", "*")
    for name, resource in (
        ("klm-module-deployments", "deployments"),
        ("klm-module-statefulsets", "statefulsets"),
    ):
        status = watchers[name].spec
        assert status.labels_to_watch == {names.MANAGED_BY_LABEL: names.MANAGED_BY_KYMA}
        assert (status.resource_to_watch.group, status.resource_to_watch.resource) == ("apps", resource)
        assert status.field == "status"


def test_watchers_route_to_the_listener_service_through_the_gateway() -> None:
    (service,) = _of_kind("Service")
    (gateway_doc,) = _of_kind("Gateway")
    gateway = Gateway.from_object(gateway_doc)
    annotation = gateway_doc["metadata"]["annotations"]["proxy.istio.io/config"]
    assert "SANITIZE_SET" in annotation
    (server,) = gateway.spec.servers
    assert server.tls is not None and server.tls.mode == "MUTUAL"
    assert server.tls.credential_name == "klm-istio-gateway"  # the Secret the operator's PKI writes
    for doc in _of_kind("Watcher"):
        watcher = Watcher.from_object(doc)
        watcher.metadata.uid = "uid"
        info = watcher.spec.service_info
        assert (info.name, info.namespace, info.port) == (
            service["metadata"]["name"],
            service["metadata"]["namespace"],
            service["spec"]["ports"][0]["port"],
        )
        vs = render(watcher, [gateway], namespace=names.KCP_NAMESPACE)
        assert vs.spec.gateways == [f"{KCP_NAMESPACE}/klm-watcher"]
        assert vs.spec.hosts == server.hosts


def test_rbac_covers_what_the_watcher_controller_does() -> None:
    (role,) = [r for r in _of_kind("Role") if r["metadata"]["name"] == "klm-controller-manager"]
    assert role["metadata"]["namespace"] == KCP_NAMESPACE
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {
        ("operator.kyma-project.io", "watchers", "watch"),
        ("operator.kyma-project.io", "watchers", "patch"),
        ("operator.kyma-project.io", "watchers/status", "patch"),
        ("networking.istio.io", "gateways", "watch"),
        ("networking.istio.io", "virtualservices", "create"),
        ("networking.istio.io", "virtualservices", "update"),
        ("networking.istio.io", "virtualservices", "delete"),
        ("", "secrets", "create"),
        ("", "secrets", "update"),
        ("", "events", "create"),
    }
    assert needed <= granted
    (account,) = _of_kind("ServiceAccount")
    for binding in _of_kind("RoleBinding") + _of_kind("ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": KCP_NAMESPACE}
        ]
