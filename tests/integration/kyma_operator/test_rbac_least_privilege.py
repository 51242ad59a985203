"""The operator does its job with exactly manifests/kcp/rbac.yaml, and nothing more is granted.

Why: a Role that lacks a verb the code uses only shows in a cluster, as a 403 in a reconcile. Here
the operator runs as the ``klm-controller-manager`` ServiceAccount: a token from the TokenRequest API
of a real kube-apiserver (``--authorization-mode=RBAC``, tests/controlplane), with the objects of
rbac.yaml applied as shipped (kcp-system, istio-system). The first test drives a Kyma through its
life with the Watcher feature, the listener, leader election, sharding and a module (Manifest
created, status read, the access Secret's shard label, deletion, a manual CA rotation, a gateway
Secret repair); the second runs the Manifest controller (install from the real registry, Ready,
uninstall). Any 403 would leave the
object short of its state, and is also looked for in the log. The set-up itself (Kyma, access
Secret, templates, the Manifest) acts as the cluster admin, as a provisioner would.

Its own control plane (one KCP, one runtime): the shared KCP of the suite has no kcp-system of
ours to bind to. Upstream: ``rbac_privileges_test.go`` (the rules; ours are asserted in
tests/unit/kyma_operator/test_rbac_privileges.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES, WATCHERS
from kyma_operator.app import build_operator
from kyma_operator.identity.store import GATEWAY_REPAIRED
from kyma_operator.runtime.errors import AlreadyExists, Forbidden
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    Resource,
)
from kyma_operator.runtime.shardmap import SHARD_LABEL, shard_of
from localrun.kcp import SKR_CRD_PLURALS
from tests.controlplane.cluster import APIServer, ControlPlane, free_port
from tests.controlplane.crds import REPO_ROOT, apply_crds
from tests.integration.kyma_operator.controllers.manifest import module as mod
from tests.integration.kyma_operator.controllers.manifest.published import RegistryModules
from tests.integration.kyma_operator.harness import (
    RunningOperator,
    create_runtime,
    default_watcher,
    operator_config,
    runtime_agent,
)
from tests.integration.kyma_operator.identity.test_gateway_secret_server_cert_metric import (
    events_for,
    write_foreign_cert,
)
from tests.integration.kyma_operator.modules_env import (
    KYMA,
    MODULE,
    RUNTIME_ID,
    absent,
    exists,
    mark_agent_ready,
    modules_of,
    release_meta,
    template,
)
from tests.polling import eventually
from tests.registry.server import LocalRegistry

RBAC = REPO_ROOT / "manifests" / "kcp" / "rbac.yaml"
KCP_NS, ISTIO_NS, ACCOUNT = "kcp-system", "istio-system", "klm-controller-manager"
KINDS: dict[str, Resource] = {
    "ServiceAccount": SERVICE_ACCOUNTS,
    "ClusterRole": CLUSTER_ROLES,
    "ClusterRoleBinding": CLUSTER_ROLE_BINDINGS,
    "Role": ROLES,
    "RoleBinding": ROLE_BINDINGS,
}


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane(["kcp-rbac", "skr-rbac"]) as cp:
        apply_crds(cp["kcp-rbac"].kubeconfig_path)
        apply_crds(cp["skr-rbac"].kubeconfig_path, plurals=SKR_CRD_PLURALS)
        yield cp


@contextlib.asynccontextmanager
async def admin_of(server: APIServer) -> AsyncIterator[KubeClient]:
    client = KubeClient.from_kubeconfig_file(server.kubeconfig_path)
    try:
        yield client
    finally:
        await client.close()


async def apply_rbac(admin: KubeClient) -> None:
    """The namespaces and every object of rbac.yaml as shipped (each test calls it; idempotent)."""
    for namespace in (KCP_NS, ISTIO_NS):
        with contextlib.suppress(AlreadyExists):
            await admin.create(NAMESPACES, {"metadata": {"name": namespace}})
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc:
            with contextlib.suppress(AlreadyExists):
                await admin.create(KINDS[doc["kind"]], doc)


async def service_account_kubeconfig(admin: KubeClient, server: APIServer) -> bytes:
    """A kubeconfig with a token of the operator's ServiceAccount, as the kubelet would mount one."""
    answer = await admin.create_subresource(
        SERVICE_ACCOUNTS, ACCOUNT, "token", {"spec": {"expirationSeconds": 3600}}, KCP_NS
    )
    token = answer["status"]["token"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "kcp",
                "cluster": {
                    "server": server.url,
                    "certificate-authority-data": base64.b64encode(server.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "kcp", "context": {"cluster": "kcp", "user": ACCOUNT}}],
        "current-context": "kcp",
    }
    return yaml.safe_dump(config).encode()


@contextlib.asynccontextmanager
async def operator_as(client: KubeClient, config: Any) -> AsyncIterator[RunningOperator]:
    operator = await build_operator(config, client)
    running = RunningOperator(operator, config.namespace)
    operator.kyma.reconciler.observers.append(running.reports.append)
    task = asyncio.create_task(operator.run())
    try:
        await asyncio.wait_for(operator.manager.started.wait(), 30.0)
        yield running
    finally:
        await operator.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def forbidden_lines(records: list[logging.LogRecord]) -> list[str]:
    lines = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    return [line for line in lines if "forbidden" in line.lower() or " 403" in line]


async def test_the_operator_runs_a_kyma_through_its_life_with_exactly_the_shipped_rbac(
    plane: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    kcp_server, skr_server = plane["kcp-rbac"], plane["skr-rbac"]
    async with admin_of(kcp_server) as admin, admin_of(skr_server) as skr:
        await apply_rbac(admin)
        account = KubeClient.from_kubeconfig_bytes(await service_account_kubeconfig(admin, kcp_server))
        try:
            # nothing cluster-wide on Secrets, nothing in other namespaces, no Kyma creation
            with pytest.raises(Forbidden):
                await account.list(SECRETS, None)
            with pytest.raises(Forbidden):
                await account.get(SECRETS, "anything", "default")
            with pytest.raises(Forbidden):
                await account.create(KYMAS, {"metadata": {"name": "x", "namespace": KCP_NS}, "spec": {}})

            with contextlib.suppress(AlreadyExists):
                await admin.create(WATCHERS, default_watcher(KCP_NS))
            await admin.create(MODULE_TEMPLATES, template(KCP_NS, "1.0.0"))
            await admin.create(MODULE_RELEASE_METAS, release_meta(KCP_NS, {"regular": "1.0.0"}))
            agent_port = free_port()
            config = operator_config(
                KCP_NS,
                istio_namespace=ISTIO_NS,
                leader_elect=True,
                leader_election_id="klm-rbac-test",
                # as deployed (operator-deployment.yaml): shard Leases, Kyma shard labels, hand-off;
                # scoped caches on top: their Secret labelling must be allowed by the shipped RBAC too
                sharding=True,
                shard_scoped_caches=True,
                shards=4,
                replica_id="rbac-0",
                handoff_host="127.0.0.1",
                handoff_port=free_port(),
                listener_enabled=True,
                webhook_urls={KYMA: f"https://127.0.0.1:{agent_port}"},
                kyma_modules=True,
                manifest_controller_enabled=False,
                agent_readiness_poll=0.5,
            )
            async with operator_as(account, config) as running:
                await create_runtime(admin, KCP_NS, KYMA, RUNTIME_ID, skr_server.kubeconfig)
                async with runtime_agent(running, skr, RUNTIME_ID, agent_port, tmp_path / "ssl"):
                    await mark_agent_ready(skr, config.sync_namespace)

                    async def kyma_in(state: str) -> dict[str, Any] | None:
                        kyma = await admin.get(KYMAS, KYMA, KCP_NS)
                        return kyma if (kyma.get("status") or {}).get("state") == state else None

                    await eventually(lambda: kyma_in("Ready"), "the Kyma Ready", within=60)
                    # the module: the runtime's admin enables it, the operator creates its Manifest
                    await skr.patch(
                        KYMAS,
                        names.DEFAULT_REMOTE_KYMA_NAME,
                        {"spec": {"modules": [{"name": MODULE}]}},
                        config.sync_namespace,
                    )
                    (manifest,) = await eventually(
                        lambda: _manifests(admin), "the module's Manifest", within=30
                    )
                    await admin.patch_status(MANIFESTS, manifest, {"status": {"state": "Ready"}}, KCP_NS)

                    async def module_ready() -> bool:
                        kyma = await kyma_in("Ready")
                        return kyma is not None and modules_of(kyma).get(MODULE, {}).get("state") == "Ready"

                    await eventually(module_ready, "the module Ready", within=30)

                    # what the rules allowed the operator to write
                    for secret in ("klm-watcher", "klm-istio-gateway", f"{KYMA}-webhook-tls"):
                        assert await exists(admin, SECRETS, secret, ISTIO_NS), secret
                    assert await exists(admin, LEASES, "klm-rbac-test", KCP_NS)
                    leases = (await admin.list(LEASES, KCP_NS)).items
                    assert len(leases) > 1  # the leader's and the shard group's
                    # the access Secret (the provisioner's) carries its Kyma's shard label (a patch)
                    shard = str(shard_of(RUNTIME_ID, 4))

                    async def secret_labelled() -> bool:
                        live = await admin.get(SECRETS, f"{KYMA}-kubeconfig", KCP_NS)
                        return bool(live["metadata"]["labels"].get(SHARD_LABEL) == shard)

                    await eventually(secret_labelled, "the access Secret labelled with its shard")
                    # a manual CA rotation rewrites the CA and gateway Secrets (update, not create)
                    feature = running.operator.watcher
                    assert feature is not None
                    before = await admin.get(SECRETS, "klm-watcher", ISTIO_NS)
                    await feature.identity.rotate_ca()
                    after = await admin.get(SECRETS, "klm-watcher", ISTIO_NS)
                    assert after["metadata"]["uid"] == before["metadata"]["uid"]
                    assert after["data"] != before["data"]
                    # a broken gateway Secret is repaired and reported with an Event in istio-system
                    await write_foreign_cert(admin, ISTIO_NS, datetime.datetime.now(datetime.UTC))
                    await feature.rotator.step()
                    assert len(await events_for(admin, ISTIO_NS, GATEWAY_REPAIRED)) == 1

                    await admin.delete(KYMAS, KYMA, KCP_NS)
                    await eventually(
                        lambda: absent(admin, KYMAS, KYMA, KCP_NS), "the Kyma deleted", within=60
                    )
                    assert await absent(admin, SECRETS, f"{KYMA}-webhook-tls", ISTIO_NS)
        finally:
            await account.close()
    assert forbidden_lines(caplog.records) == []


async def _manifests(admin: KubeClient) -> list[str] | None:
    found = [m["metadata"]["name"] for m in (await admin.list(MANIFESTS, KCP_NS)).items]
    return found or None


async def test_the_manifest_controller_installs_and_uninstalls_with_exactly_the_shipped_rbac(
    plane: ControlPlane, oci_registry: LocalRegistry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Manifest controller's own KCP calls (finalizers, status, the Kyma and its access Secret,
    the module from the real registry) under the same rules: installed, Ready, uninstalled."""
    caplog.set_level(logging.WARNING)
    kcp_server, skr_server = plane["kcp-rbac"], plane["skr-rbac"]
    kyma, module_ns = "kyma-rbac-manifests", "rbac-module"
    async with admin_of(kcp_server) as admin, admin_of(skr_server) as skr:
        await apply_rbac(admin)
        with contextlib.suppress(AlreadyExists):
            await admin.create(WATCHERS, default_watcher(KCP_NS))
        await skr.create(NAMESPACES, {"metadata": {"name": module_ns}})
        published = await RegistryModules(oci_registry, "rbac").publish(
            mod.raw_manifest(mod.module_objects(mod.group_for("rbac"), module_ns))
        )
        account = KubeClient.from_kubeconfig_bytes(await service_account_kubeconfig(admin, kcp_server))
        config = operator_config(
            KCP_NS,
            istio_namespace=ISTIO_NS,
            leader_elect=True,
            leader_election_id="klm-rbac-manifests",
            kyma_modules=False,  # the Manifest is the test's, as in the Manifest controller's own tests
            manifest_processing_interval=0.2,
            oci_insecure_registries=(oci_registry.host,),
            module_cache_dir=tmp_path / "module-cache",
        )
        try:
            async with operator_as(account, config):
                await create_runtime(admin, KCP_NS, kyma, "rt-rbac-m", skr_server.kubeconfig)
                await admin.create(MANIFESTS, mod.manifest_body("sample", KCP_NS, kyma, published))

                async def state() -> str:
                    manifest = await admin.get(MANIFESTS, "sample", KCP_NS)
                    return str((manifest.get("status") or {}).get("state") or "")

                await eventually(lambda: exists(skr, DEPLOYMENTS, "sample-operator", module_ns), "installed")
                await skr.patch_status(DEPLOYMENTS, "sample-operator", mod.deployment_available(), module_ns)

                async def ready() -> bool:
                    return await state() == "Ready"

                await eventually(ready, "the Manifest Ready", within=60)
                await admin.delete(MANIFESTS, "sample", KCP_NS)
                await eventually(
                    lambda: absent(admin, MANIFESTS, "sample", KCP_NS), "the Manifest uninstalled", within=60
                )
                assert await absent(skr, DEPLOYMENTS, "sample-operator", module_ns)
        finally:
            await account.close()
    assert forbidden_lines(caplog.records) == []
