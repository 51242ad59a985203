"""manifests/kcp applied to the real KCP (namespace overridden, like a kustomize overlay), served by the
Watcher controller, and the default Watchers' webhooks (including the "*" rule) accepted by a real SKR."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.agentinstall.installer import AgentInstaller, InstallerConfig, KymaRef
from kyma_operator.api.resources import WATCHERS
from kyma_operator.controllers.watcher.reconciler import WatcherControllerConfig
from kyma_operator.controllers.watcher.setup import build_watcher_controller
from kyma_operator.identity.store import IdentityConfig, IdentityStore
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    DEPLOYMENTS,
    NETWORK_POLICIES,
    POD_DISRUPTION_BUDGETS,
    ROLE_BINDINGS,
    ROLES,
    SERVICE_ACCOUNTS,
    SERVICES,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    Resource,
)
from kyma_wire.names import KCP_NAMESPACE
from tests.controlplane.cluster import free_port
from tests.polling import eventually

KCP_DIR = Path(__file__).resolve().parents[5] / "manifests" / "kcp"
GATEWAYS = Resource("networking.istio.io", "v1beta1", "gateways", "Gateway")
VIRTUAL_SERVICES = Resource("networking.istio.io", "v1beta1", "virtualservices", "VirtualService")
BY_KIND = {
    "ServiceAccount": SERVICE_ACCOUNTS,
    "ClusterRole": CLUSTER_ROLES,
    "ClusterRoleBinding": CLUSTER_ROLE_BINDINGS,
    "Role": ROLES,
    "RoleBinding": ROLE_BINDINGS,
    "Service": SERVICES,
    "Deployment": DEPLOYMENTS,
    "PodDisruptionBudget": POD_DISRUPTION_BUDGETS,
    "NetworkPolicy": NETWORK_POLICIES,
    "Gateway": GATEWAYS,
    "Watcher": WATCHERS,
}


def overlay(namespace: str) -> list[dict[str, Any]]:
    """The base with every ``kcp-system`` (and the Role in ``istio-system``) moved to ``namespace`` and
    cluster-wide names prefixed."""
    (kustomization,) = yaml.safe_load_all((KCP_DIR / "kustomization.yaml").read_text())
    text = "\n---\n".join((KCP_DIR / name).read_text() for name in kustomization["resources"])
    docs = [d for d in yaml.safe_load_all(text.replace(KCP_NAMESPACE, namespace)) if d]
    out = []
    for doc in docs:
        if doc["kind"] == "Namespace":
            continue
        if doc["metadata"].get("namespace") == "istio-system":
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            doc["metadata"]["name"] = f"{namespace}-{doc['metadata']['name']}"
            if doc["kind"] == "ClusterRoleBinding":
                doc["roleRef"]["name"] = f"{namespace}-{doc['roleRef']['name']}"
        out.append(doc)
    return out


async def test_kcp_manifests_apply_and_serve(
    kcp_client: KubeClient, kcp_namespace: str, skr_client: KubeClient
) -> None:
    ns = kcp_namespace
    docs = overlay(ns)
    for doc in docs:
        await kcp_client.apply(BY_KIND[doc["kind"]], doc, field_manager="test-kustomize")
    built = build_watcher_controller(kcp_client, config=WatcherControllerConfig(namespace=ns))
    task = asyncio.create_task(built.run())
    vwc_name = f"{ns}-webhook"
    try:
        for name in (
            "klm-watcher",
            "klm-module-watcher",
            "klm-module-deployments",
            "klm-module-statefulsets",
        ):

            async def ready(name: str = name) -> bool:
                obj = await kcp_client.get(WATCHERS, name, ns)
                return (obj.get("status") or {}).get("state") == "Ready"

            await eventually(ready, what=f"{name} Ready")
            vs = await kcp_client.get(VIRTUAL_SERVICES, name, ns)
            assert vs["spec"]["gateways"] == [f"{ns}/klm-watcher"]
            assert vs["spec"]["hosts"] == ["listener.kcp.example.com"]
            destination = vs["spec"]["http"][0]["route"][0]["destination"]
            assert destination == {
                "host": f"klm-controller-manager-events.{ns}.svc.cluster.local",
                "port": {"number": 8082},
            }

        # the agent configuration rendered from the default Watchers is accepted by a real SKR
        # (URL mode at a closed local port, so nothing in the shared SKR is delayed meanwhile)
        installer = AgentInstaller(
            identity=IdentityStore(kcp_client, config=IdentityConfig(namespace=ns, public_key_namespace=ns)),
            watchers=built.watchers,
            config=InstallerConfig(
                kcp_addr="listener.kcp.example.com:443",
                sync_namespace=f"{ns}-skr",
                watcher_namespace=ns,
                webhook_configuration_name=vwc_name,
                webhook_url=f"https://127.0.0.1:{free_port()}",
            ),
            wall_clock=lambda: datetime.datetime.now(datetime.UTC),
        )
        kyma = KymaRef(name="k", runtime_id="rt-manifests", skr_domain="rt.example.com")
        status = await installer.ensure(kyma, skr_client)
        assert not status.error, status.message
        vwc = await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, vwc_name)
        rules = {w["name"]: w["rules"][0] for w in vwc["webhooks"]}
        assert rules[f"{ns}.klm-module-watcher.operator.kyma-project.io"] == {
            "apiGroups": ["*"],
            "apiVersions": ["*"],
            "resources": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "scope": "*",
        }
        assert rules[f"{ns}.klm-watcher.operator.kyma-project.io"]["resources"] == ["kymas"]
        for name, resource in (("deployments", "deployments"), ("statefulsets", "statefulsets")):
            rule = rules[f"{ns}.klm-module-{name}.operator.kyma-project.io"]
            assert (rule["apiGroups"], rule["resources"]) == (["apps"], [f"{resource}/status"])
        await installer.remove(kyma, skr_client)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(NotFound):
            await skr_client.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, vwc_name)
        for doc in docs:
            if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                with contextlib.suppress(NotFound):
                    await kcp_client.delete(BY_KIND[doc["kind"]], doc["metadata"]["name"])
