"""Replacing upstream lifecycle-manager on a live control plane (docs/migration.md), on a real API server.

A dedicated API server stands in for a KCP that has run upstream for years: its KLM CRDs were first
installed by an old upstream release that stored ``v1beta1`` objects, then upgraded to upstream's
current CRDs (``tests/fixtures/upstream-klm-crds``, copied from lifecycle-manager@c5b83f1b), so
the CRDs' ``status.storedVersions`` list ``v1beta1``. On it:

* our CRDs replace upstream's in place (step 2 of the guide), the old objects stay readable, and a
  CRD without the deprecated versions would have been refused (the negative control);
* an upstream-shaped Watcher setup (Gateway, Watcher with upstream's finalizer, the VirtualService
  upstream rendered) is adopted by our Watcher controller: the VirtualService is updated in place
  (same uid) to our route prefix, nothing else is touched, and a restarted controller finds
  everything right and writes nothing (same resourceVersions).

Its own API server (not the session's KCP): the test needs upstream's CRDs under the real names.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from kyma_operator.api import Kyma, Manifest, ModuleTemplate, Watcher, names
from kyma_operator.controllers.watcher.reconciler import WatcherControllerConfig
from kyma_operator.controllers.watcher.setup import WatcherController, build_watcher_controller
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES, Resource
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME
from tests.controlplane.cluster import APIServer, ControlPlane
from tests.controlplane.crds import crd_documents, install_crds, sample_documents
from tests.integration.informers import running_informers

UPSTREAM_CRDS = Path(__file__).resolve().parents[1] / "fixtures" / "upstream-klm-crds"
GATEWAYS = Resource("networking.istio.io", "v1beta1", "gateways", "Gateway")
VIRTUAL_SERVICES = Resource("networking.istio.io", "v1beta1", "virtualservices", "VirtualService")
WATCHERS = Resource("operator.kyma-project.io", "v1beta2", "watchers", "Watcher")
SAMPLES = {doc["kind"]: doc for _, doc in sample_documents()}
GROUP = "operator.kyma-project.io"

# What an old upstream release stored in v1beta1, one minimal object per kind (v1beta1 schemas).
OLD_OBJECTS: dict[str, dict[str, Any]] = {
    "kymas": {"kind": "Kyma", "spec": {"channel": "regular"}},
    "manifests": {
        "kind": "Manifest",
        "spec": {"remote": True, "install": {"name": "raw-manifest", "source": {"repo": "r"}}},
    },
    "moduletemplates": {"kind": "ModuleTemplate", "spec": {"target": "remote", "descriptor": {}}},
    "watchers": {
        "kind": "Watcher",
        "spec": {
            "field": "spec",
            "gateway": {"selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}},
            "resourceToWatch": {"group": GROUP, "version": "*", "resource": "kymas"},
            "serviceInfo": {
                "name": "klm-controller-manager-events",
                "namespace": KCP_NAMESPACE,
                "port": 8082,
            },
        },
    },
}

KEY_FIELDS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "kymas": lambda spec: spec["channel"] == "regular",
    "manifests": lambda spec: spec["install"]["name"] == "raw-manifest",
    "moduletemplates": lambda spec: spec["descriptor"] == {},
    "watchers": lambda spec: spec["serviceInfo"]["port"] == 8082,
}


@pytest.fixture(scope="module")
def old_kcp() -> Iterator[APIServer]:
    with ControlPlane(["old-kcp"]) as plane:
        yield plane["old-kcp"]


@pytest.fixture(scope="module")
def api(old_kcp: APIServer) -> Iterator[kubernetes.client.ApiClient]:
    client = kubernetes.config.new_client_from_config(config_file=str(old_kcp.kubeconfig_path))
    yield client
    client.close()


def _upstream_crd(plural: str) -> dict[str, Any]:
    path = UPSTREAM_CRDS / f"operator.kyma-project.io_{plural}.yaml"
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def _as_old_release(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD as an old upstream release shipped it: v1beta1 served and the storage version."""
    old = copy.deepcopy(crd)
    for version in old["spec"]["versions"]:
        version["served"] = True
        version["storage"] = version["name"] == "v1beta1"
        version.pop("deprecated", None)
        version.pop("deprecationWarning", None)
    return old


def _wait_established(extensions: kubernetes.client.ApiextensionsV1Api, name: str) -> None:
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        crd = extensions.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in (crd.status.conditions or [])}
        if conditions.get("Established") == "True":
            return
        time.sleep(0.05)  # polling with a deadline
    raise TimeoutError(f"{name} not Established")


def _replace(extensions: kubernetes.client.ApiextensionsV1Api, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    current = extensions.read_custom_resource_definition(name)
    desired = {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}}
    extensions.replace_custom_resource_definition(name, desired)


def _ours(plural: str) -> dict[str, Any]:
    (doc,) = crd_documents([plural])
    return doc


def test_our_crds_replace_upstreams_in_place_where_v1beta1_was_stored(
    api: kubernetes.client.ApiClient,
) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(api)
    objects = kubernetes.client.CustomObjectsApi(api)
    kubernetes.client.CoreV1Api(api).create_namespace({"metadata": {"name": KCP_NAMESPACE}})
    # 1. An old upstream release: v1beta1 is stored; objects are written in v1beta1.
    for plural, obj in OLD_OBJECTS.items():
        crd = _upstream_crd(plural)
        extensions.create_custom_resource_definition(_as_old_release(crd))
        _wait_established(extensions, crd["metadata"]["name"])
        body = {"apiVersion": f"{GROUP}/v1beta1", "metadata": {"name": f"old-{plural}"}, **obj}
        objects.create_namespaced_custom_object(GROUP, "v1beta1", KCP_NAMESPACE, plural, body)
    # 2. Upgraded to upstream's current CRDs: v1beta2 stored, v1beta1 kept but not served.
    for plural in OLD_OBJECTS:
        _replace(extensions, _upstream_crd(plural))
        stored = extensions.read_custom_resource_definition(f"{plural}.{GROUP}").status.stored_versions
        assert stored == ["v1beta1", "v1beta2"]
    extensions.create_custom_resource_definition(_upstream_crd("modulereleasemetas"))
    # Negative control: a CRD without the deprecated version is refused on such a cluster.
    stripped = copy.deepcopy(_ours("kymas"))
    stripped["spec"]["versions"] = [v for v in stripped["spec"]["versions"] if v["name"] != "v1beta1"]
    with pytest.raises(kubernetes.client.ApiException) as refused:
        _replace(extensions, stripped)
    assert refused.value.status == 422
    assert "must remain in spec.versions" in (refused.value.body or ""), refused.value.body
    # 3. Ours in place of upstream's: accepted, Established, old objects readable in v1beta2.
    installed = install_crds(api)
    assert f"kymas.{GROUP}" in installed
    models = {"kymas": Kyma, "manifests": Manifest, "moduletemplates": ModuleTemplate, "watchers": Watcher}
    for plural, model in models.items():
        crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}")
        assert crd.status.stored_versions == ["v1beta1", "v1beta2"]
        assert [(v.name, v.served, v.storage) for v in crd.spec.versions] == [
            ("v1beta1", False, False),
            ("v1beta2", True, True),
        ]
        read = objects.get_namespaced_custom_object(GROUP, "v1beta2", KCP_NAMESPACE, plural, f"old-{plural}")
        assert read["apiVersion"] == f"{GROUP}/v1beta2"
        assert KEY_FIELDS[plural](read["spec"])
        if plural != "moduletemplates":  # the minimal v1beta1 template has an empty descriptor
            model.from_object(read)
    for plural in OLD_OBJECTS:  # leave kcp-system to the next test's upstream-shaped objects
        objects.delete_namespaced_custom_object(GROUP, "v1beta2", KCP_NAMESPACE, plural, f"old-{plural}")


@contextlib.asynccontextmanager
async def _watcher_controller(client: KubeClient) -> AsyncIterator[WatcherController]:
    built = build_watcher_controller(client, config=WatcherControllerConfig(namespace=KCP_NAMESPACE))
    async with running_informers(built.informers):
        yield built


def _version(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


async def test_upstream_watcher_setup_is_adopted_without_rewriting_what_is_right(
    api: kubernetes.client.ApiClient, old_kcp: APIServer
) -> None:
    install_crds(api)  # idempotent: ours, whether or not the test above ran first
    client = KubeClient.from_kubeconfig_file(old_kcp.kubeconfig_path)
    try:
        with contextlib.suppress(Exception):
            await client.create(NAMESPACES, {"metadata": {"name": KCP_NAMESPACE}})
        # What upstream left: Gateway, Watcher (with upstream's finalizer), upstream's VirtualService.
        gateway = await client.create(GATEWAYS, copy.deepcopy(SAMPLES["Gateway"]))
        watcher_doc = copy.deepcopy(SAMPLES["Watcher"])
        watcher_doc["metadata"]["name"] = "klm-watcher-adopted"
        watcher_doc["metadata"]["finalizers"] = [names.WATCHER_FINALIZER]
        watcher = await client.create(WATCHERS, watcher_doc)
        upstream_vs = copy.deepcopy(SAMPLES["VirtualService"])
        upstream_vs["metadata"]["name"] = watcher["metadata"]["name"]
        upstream_vs["metadata"]["ownerReferences"][0].update(
            name=watcher["metadata"]["name"], uid=watcher["metadata"]["uid"]
        )
        upstream_vs["spec"]["http"][0]["name"] = f"{KCP_NAMESPACE}/{watcher['metadata']['name']}"
        upstream_vs["spec"]["http"][0]["match"][0]["uri"]["prefix"] = f"/v2/{OPERATOR_NAME}/event"
        virtual_service = await client.create(VIRTUAL_SERVICES, upstream_vs)
        vs_name = virtual_service["metadata"]["name"]

        # Our operator takes over: one reconcile of the Watcher (the only one in kcp-system).
        async with _watcher_controller(client) as controller:
            await asyncio.wait_for(controller.controller.process_next(), 10.0)
        adopted_vs = await client.get(VIRTUAL_SERVICES, vs_name, KCP_NAMESPACE)
        assert adopted_vs["metadata"]["uid"] == virtual_service["metadata"]["uid"], "updated in place"
        assert adopted_vs["spec"]["http"][0]["match"][0]["uri"]["prefix"] == f"/v2/{OPERATOR_NAME}/"
        adopted_watcher = await client.get(WATCHERS, watcher["metadata"]["name"], KCP_NAMESPACE)
        assert adopted_watcher["metadata"]["uid"] == watcher["metadata"]["uid"]
        assert adopted_watcher["metadata"]["finalizers"] == [names.WATCHER_FINALIZER]
        assert adopted_watcher["status"]["state"] == "Ready"
        assert _version(await client.get(GATEWAYS, gateway["metadata"]["name"], KCP_NAMESPACE)) == _version(
            gateway
        )

        # A restarted operator finds everything right and writes nothing.
        before = {
            "gateway": _version(await client.get(GATEWAYS, gateway["metadata"]["name"], KCP_NAMESPACE)),
            "watcher": _version(adopted_watcher),
            "virtualservice": _version(adopted_vs),
        }
        async with _watcher_controller(client) as restarted:
            await asyncio.wait_for(restarted.controller.process_next(), 10.0)
            assert restarted.reconciler.status_writes == 0
        after = {
            "gateway": _version(await client.get(GATEWAYS, gateway["metadata"]["name"], KCP_NAMESPACE)),
            "watcher": _version(await client.get(WATCHERS, watcher["metadata"]["name"], KCP_NAMESPACE)),
            "virtualservice": _version(await client.get(VIRTUAL_SERVICES, vs_name, KCP_NAMESPACE)),
        }
        assert after == before
    finally:
        await client.close()
