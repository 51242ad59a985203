"""Upstream ``deprovision_test.go`` (background and foreground deletion), translated (issue 25 item 4).

A Kyma is deleted while one of its modules waits for a blocking finalizer on its CR; then the
runtime stops answering (its access Secret now points at a port nothing listens on: the runtime's
API server is shared by the session and cannot be taken away). As upstream: the Kyma stays, in
Error, and is retried while its access Secret exists; deleting the Secret completes the deletion,
its Manifest (blocked in the runtime) goes with it. Foreground deletion needs the garbage collector,
so that test uses the session's living cluster (kube-controller-manager) as KCP.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import pytest

from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.kyma.deletion import RUNTIME_UNREACHABLE_WHILE_DELETING
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES, SECRETS
from tests.controlplane.cluster import APIServer, free_port
from tests.controlplane.crds import apply_crds
from tests.integration.kyma_operator.installed_env import installed_env, publish_catalog
from tests.integration.kyma_operator.modules_env import KYMA, absent
from tests.polling import eventually
from tests.registry.server import LocalRegistry

SECRET = f"{KYMA}-kubeconfig"


@pytest.fixture(scope="session")
def living_kcp(living: APIServer) -> APIServer:
    """The living cluster with our CRDs: a KCP whose garbage collector runs (foreground deletion)."""
    apply_crds(living.kubeconfig_path)
    return living


@pytest.fixture
async def living_namespace(living_kcp: APIServer, unique_name: str) -> AsyncIterator[tuple[KubeClient, str]]:
    client = KubeClient.from_kubeconfig_file(living_kcp.kubeconfig_path)
    try:
        await client.create(NAMESPACES, {"metadata": {"name": unique_name}})
        yield client, unique_name
        with contextlib.suppress(NotFound):
            await client.delete(NAMESPACES, unique_name)
    finally:
        await client.close()


async def _runtime_stops_answering(kcp: KubeClient, ns: str, server: APIServer) -> None:
    """Upstream removes the k3d cluster; here its kubeconfig points at a port nobody listens on."""
    secret = await kcp.get(SECRETS, SECRET, ns)
    kubeconfig = base64.b64decode(secret["data"]["config"]).decode()
    dead = kubeconfig.replace(f"127.0.0.1:{server.port}", f"127.0.0.1:{free_port()}")
    assert dead != kubeconfig
    await kcp.patch(SECRETS, SECRET, {"data": {"config": base64.b64encode(dead.encode()).decode()}}, ns)


async def _deletion_test(
    kcp: KubeClient,
    ns: str,
    skr: KubeClient,
    skr_server: APIServer,
    registry: LocalRegistry,
    tmp_path: Path,
    module: str,
    propagation: Literal["Background", "Foreground"],
) -> None:
    """Upstream's ``RunDeletionTest(deletionPropagation)``, step by step."""
    await publish_catalog(kcp, ns, registry, module, {"regular": "1.0.0"})
    async with installed_env(kcp, ns, skr, skr_server, registry, tmp_path, module) as s:
        # When Kyma Module is enabled on SKR Cluster
        await s.env.set_runtime_spec({"modules": [{"name": s.module}]})
        await s.make_ready("1.0.0")
        await s.wait_manifest_state("Ready")
        # And finalizer is added to Module CR; And Kyma Module is disabled
        await s.set_cr_finalizers(["blocking-finalizer"])
        await s.env.set_runtime_spec({"modules": []})
        # Then Module CR stays Deleting (being deleted); Manifest CR is in "Deleting" State
        await s.wait_manifest_state("Deleting")
        await eventually(s.cr_being_deleted, "the Module CR being deleted, not removed")

        # When KCP Kyma CR is deleted; Then KCP Kyma CR still exists
        await kcp.delete(KYMAS, KYMA, ns, propagation=propagation)
        kyma = await s.env.wait_kyma(lambda k: (k.get("status") or {}).get("state") == "Deleting", "Deleting")
        assert kyma["metadata"].get("deletionTimestamp")

        # When SKR Cluster is removed; Then KCP Kyma CR is in "Error" State
        await _runtime_stops_answering(kcp, ns, skr_server)
        await s.wait_kyma_state("Error", within=40.0)
        # ... and stays while its access Secret exists: the next retries find it Error again
        mark = len(s.env.running.reports)
        await s.env.running.wait_report(
            lambda r: (
                r.request.name == KYMA
                and r.outcome == "Error"
                and RUNTIME_UNREACHABLE_WHILE_DELETING in r.message
            ),
            what="a retry of the unreachable runtime",
            after=mark,
            deadline=40.0,
        )
        kyma = await s.env.kyma()
        assert kyma["status"]["state"] == "Error" and kyma["metadata"].get("deletionTimestamp")
        assert await s.manifest() is not None
        await kcp.get(SECRETS, SECRET, ns)

        # When Kubeconfig Secret is deleted; Then Manifest CR is deleted; And KCP Kyma CR is deleted
        await kcp.delete(SECRETS, SECRET, ns)
        await eventually(lambda: absent(kcp, SECRETS, SECRET, ns), "the access Secret gone")
        await eventually(s.manifest_gone, "the Manifest deleted", within=40.0)
        await eventually(lambda: absent(kcp, KYMAS, KYMA, ns), "the Kyma deleted", within=40.0)


async def test_kyma_deprovision_with_background_propagation(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    await _deletion_test(
        kcp_client, kcp_namespace, skr_client, skr_crds[0], oci_registry, tmp_path, module_name, "Background"
    )


async def test_kyma_deprovision_with_foreground_propagation(
    living_namespace: tuple[KubeClient, str],
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    oci_registry: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    kcp, ns = living_namespace
    await _deletion_test(kcp, ns, skr_client, skr_crds[0], oci_registry, tmp_path, module_name, "Foreground")
