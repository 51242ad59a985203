"""manifests/kcp/rbac.yaml grants what the operator needs, no more (upstream ``rbac_privileges_test.go``).

Upstream's e2e lists the klm-controller-manager ServiceAccount's bindings and compares every bound
rule with an expected list: one ClusterRoleBinding (CRDs, read-only), two RoleBindings in
kcp-system (leader election, the manager role) and one in istio-system (the watcher certificates).
This test does the same over the shipped YAML. Where we grant less than upstream, on purpose:

* no ``customresourcedefinitions/status`` update, ``configmaps``, ``services`` (nothing of ours
  uses them), no cert-manager kinds (our CA is our own code, not cert-manager);
* istio-system Secrets: ``get/create/update/delete`` (the identity store reads by name, never lists);
* no kyma-system binding: upstream's is for a runtime that is the KCP itself; ours reaches every
  runtime through its kubeconfig Secret.

That the operator really works with exactly these rules is
``tests/integration/kyma_operator/test_rbac_least_privilege.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kyma_wire.names import KCP_NAMESPACE

RBAC = Path(__file__).resolve().parents[3] / "manifests" / "kcp" / "rbac.yaml"
ACCOUNT = "klm-controller-manager"
ISTIO_NAMESPACE = "istio-system"
ALL = ("get", "list", "watch", "create", "update", "patch", "delete")
READ = ("get", "list", "watch")

Grants = set[tuple[str, str, str]]


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(RBAC.read_text()) if d]


def _grants(rules: list[dict[str, Any]]) -> Grants:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _expand(*entries: tuple[str, tuple[str, ...], tuple[str, ...]]) -> Grants:
    return {(g, r, v) for g, resources, verbs in entries for r in resources for v in verbs}


def _bound_to_account(binding: dict[str, Any]) -> bool:
    return any(
        s["kind"] == "ServiceAccount" and s["name"] == ACCOUNT and s["namespace"] == KCP_NAMESPACE
        for s in binding["subjects"]
    )


def _role(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    (role,) = [
        d
        for d in _docs()
        if d["kind"] == kind and d["metadata"]["name"] == name and d["metadata"].get("namespace") == namespace
    ]
    return role


def _bindings(kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    return [
        d
        for d in _docs()
        if d["kind"] == kind and d["metadata"].get("namespace") == namespace and _bound_to_account(d)
    ]


def _bound_grants(binding: dict[str, Any]) -> Grants:
    ref = binding["roleRef"]
    namespace = None if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
    return _grants(_role(ref["kind"], ref["name"], namespace)["rules"])


OPERATOR = "operator.kyma-project.io"
ISTIO = "networking.istio.io"


def test_one_cluster_role_binding_reading_crds_only() -> None:
    (binding,) = _bindings("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "klm-controller-manager-crds",
    }
    assert _bound_grants(binding) == _expand(("apiextensions.k8s.io", ("customresourcedefinitions",), READ))


def test_kcp_system_has_the_manager_and_the_leader_election_role() -> None:
    bindings = {b["metadata"]["name"]: b for b in _bindings("RoleBinding", KCP_NAMESPACE)}
    assert set(bindings) == {"klm-controller-manager", "klm-controller-manager-leader-election"}
    assert _bound_grants(bindings["klm-controller-manager-leader-election"]) == _expand(
        ("coordination.k8s.io", ("leases",), ALL), ("", ("events",), ("create", "patch"))
    )
    assert _bound_grants(bindings["klm-controller-manager"]) == _expand(
        (OPERATOR, ("kymas", "watchers"), ("get", "list", "watch", "update", "patch")),
        (OPERATOR, ("manifests",), ALL),
        (OPERATOR, ("moduletemplates", "modulereleasemetas", "modulerolloutpolicies"), READ),
        (OPERATOR, ("modulerollouts",), ("get", "list", "watch", "create")),
        (OPERATOR, ("modulerollouts/status",), ("get", "update", "patch")),
        (OPERATOR, ("kymas/status", "manifests/status", "watchers/status"), ("get", "update", "patch")),
        (OPERATOR, ("kymas/finalizers", "manifests/finalizers", "watchers/finalizers"), ("update",)),
        (ISTIO, ("gateways",), READ),
        (ISTIO, ("virtualservices",), ALL),
        ("", ("secrets",), ALL),
        ("", ("events",), ("create", "patch")),
    )


def test_istio_system_has_the_certificate_secrets_only() -> None:
    (binding,) = _bindings("RoleBinding", ISTIO_NAMESPACE)
    assert binding["roleRef"]["kind"] == "Role"
    assert _bound_grants(binding) == _expand(
        ("", ("secrets",), ("get", "create", "update", "delete")), ("", ("events",), ("create", "patch"))
    )


def test_no_binding_in_any_other_namespace_and_no_wildcards() -> None:
    namespaces = {b["metadata"]["namespace"] for b in _bindings("RoleBinding", None) + _all_role_bindings()}
    assert namespaces == {KCP_NAMESPACE, ISTIO_NAMESPACE}
    for doc in _docs():
        for rule in doc.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], doc["metadata"]["name"]


def test_no_cluster_wide_secret_access_and_no_cluster_wide_write() -> None:
    cluster_wide: Grants = set()
    for binding in _bindings("ClusterRoleBinding"):
        cluster_wide |= _bound_grants(binding)
    assert not {g for g in cluster_wide if g[1] == "secrets"}
    assert {verb for _, _, verb in cluster_wide} <= set(READ)


def _all_role_bindings() -> list[dict[str, Any]]:
    return [d for d in _docs() if d["kind"] == "RoleBinding" and _bound_to_account(d)]
