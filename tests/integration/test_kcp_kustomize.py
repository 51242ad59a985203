"""``kustomize build manifests/kcp`` with the real kustomize, accepted by a real API server (dry-run).

Why: manifests/kcp is what a cluster operator applies (README, "Running it in a cluster"). The suite
builds it with kustomize (Go module ``sigs.k8s.io/kustomize/kustomize/v5``, built once into
``.cache/bin``) and has the living cluster's API server admit every object with server-side apply
and ``dryRun=All``: schema validation of the built-in kinds, of our CRDs (Watcher) and of the Istio
CRDs (Gateway), admission, field ownership, without creating anything but the CRDs and the
namespaces the objects live in (a namespaced dry-run needs its namespace to exist).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import yaml

from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import REPO_ROOT, apply_crds
from tests.kustomize.binaries import find_or_build

KCP = REPO_ROOT / "manifests" / "kcp"


def kustomize_build(path: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(find_or_build()), "build", path], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture
def dynamic(living: APIServer) -> Iterator[kubernetes.dynamic.DynamicClient]:
    """A dynamic client of the living cluster, created after our CRDs (Watcher, Istio kinds) serve."""
    apply_crds(living.kubeconfig_path)  # idempotent
    api_client = kubernetes.config.new_client_from_config(config_file=str(living.kubeconfig_path))
    try:
        yield kubernetes.dynamic.DynamicClient(api_client)
    finally:
        api_client.close()


def test_kustomize_builds_every_listed_file() -> None:
    built = kustomize_build("manifests/kcp")
    (kustomization,) = yaml.safe_load_all((KCP / "kustomization.yaml").read_text())
    listed = [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((KCP / name).read_text())
        if doc
    ]
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, built)) == sorted(map(key, listed))
    assert {"Deployment", "Service", "Gateway", "Watcher", "Namespace", "ServiceAccount"} <= {
        d["kind"] for d in built
    }


def test_the_built_kcp_is_accepted_by_the_api_server(
    dynamic: kubernetes.dynamic.DynamicClient,
) -> None:
    built = kustomize_build("manifests/kcp")
    namespaces = {d["metadata"]["namespace"] for d in built if d["metadata"].get("namespace")}
    core = kubernetes.client.CoreV1Api(dynamic.client)
    existing = {ns.metadata.name for ns in core.list_namespace().items}
    for name in sorted(namespaces - existing):
        core.create_namespace({"metadata": {"name": name}})
    accepted = []
    for doc in built:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        result = dynamic.server_side_apply(
            resource,
            body=doc,
            namespace=doc["metadata"].get("namespace"),
            field_manager="kustomize-dry-run",
            force_conflicts=True,
            dry_run="All",
        )
        assert result.metadata.name == doc["metadata"]["name"]
        accepted.append(f"{doc['kind']}/{doc['metadata']['name']}")
    assert len(accepted) == len(built)
    # dry-run: none of the namespaced objects exists now
    deployment = next(d for d in built if d["kind"] == "Deployment")
    apps = kubernetes.client.AppsV1Api(dynamic.client)
    with pytest.raises(kubernetes.client.ApiException) as missing:
        apps.read_namespaced_deployment(deployment["metadata"]["name"], deployment["metadata"]["namespace"])
    assert missing.value.status == 404


def test_an_invalid_object_is_refused_by_the_dry_run(
    dynamic: kubernetes.dynamic.DynamicClient,
) -> None:
    watcher = next(d for d in kustomize_build("manifests/kcp") if d["kind"] == "Watcher")
    watcher["spec"]["field"] = "no-such-field-value"
    resource = dynamic.resources.get(api_version=watcher["apiVersion"], kind="Watcher")
    core = kubernetes.client.CoreV1Api(dynamic.client)
    if watcher["metadata"]["namespace"] not in {ns.metadata.name for ns in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": watcher["metadata"]["namespace"]}})
    with pytest.raises(kubernetes.client.ApiException) as refused:
        dynamic.server_side_apply(
            resource,
            body=watcher,
            namespace=watcher["metadata"]["namespace"],
            field_manager="kustomize-dry-run",
            dry_run="All",
        )
    assert refused.value.status == 422
