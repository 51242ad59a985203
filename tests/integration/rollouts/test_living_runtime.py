"""The halt and the revert end to end on a living cluster, with the real registry and the Manifest
controller (docs/rollouts.md §15): nothing plays a part.

The session's living cluster (kube-apiserver, kube-controller-manager, kube-scheduler, kwok nodes)
is the KCP and, through a single-cluster Kyma (label ``operator.kyma-project.io/sync=false``), its
own runtime. The module is published to the session's OCI registry as ``kyma module push`` does,
in two versions: 1.0.0, whose manager Deployment becomes available on the kwok nodes, and 1.1.0,
whose Deployment asks for a node no kwok node is (``nodeSelector``): it never becomes available,
so its Manifest stays Processing and the canary wave's progress deadline fails it. With
``onFailure: Revert`` the canary goes back to 1.0.0: the Manifest controller installs 1.0.0's
Deployment again, the kubelet-less kwok nodes run it, the Manifest turns Ready, the run is Reverted.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, DEPLOYMENTS, NAMESPACES
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds
from tests.integration.kyma_operator.harness import operator_config, running_operator
from tests.integration.kyma_operator.installed_env import (
    component_of,
    deployment_name,
    module_files,
    samples_of,
)
from tests.integration.kyma_operator.modules_env import release_meta
from tests.integration.rollouts.conftest import rollout_config
from tests.integration.rollouts.fleet import NEW, OLD, RING_LABEL, create_policy, events_of, run_in_phase
from tests.polling import eventually
from tests.registry.modules import publish_module
from tests.registry.server import LocalRegistry

NEVER = {"rollouts.test/never-scheduled": "true"}


@pytest.fixture(scope="session")
def living_kcp(living: APIServer) -> APIServer:
    """The living cluster with our CRDs: KCP and, for single-cluster Kymas, the runtime too."""
    apply_crds(living.kubeconfig_path)
    return living


@pytest.fixture
async def living_ns(living_kcp: APIServer, unique_name: str) -> AsyncIterator[tuple[KubeClient, str]]:
    client = KubeClient.from_kubeconfig_file(living_kcp.kubeconfig_path)
    try:
        for name in (unique_name, f"{unique_name}-skr"):
            await client.create(NAMESPACES, {"metadata": {"name": name}})
        yield client, unique_name
        for name in (unique_name, f"{unique_name}-skr"):
            with contextlib.suppress(NotFound):
                await client.delete(NAMESPACES, name)
    finally:
        await client.close()


def unschedulable(raw: bytes) -> bytes:
    """The module's objects with its Deployment asking for a node that does not exist."""
    objects = [o for o in yaml.safe_load_all(raw) if o]
    for obj in objects:
        if obj["kind"] == "Deployment":
            obj["spec"]["template"]["spec"]["nodeSelector"] = dict(NEVER)
    return yaml.safe_dump_all(objects, sort_keys=True).encode()


async def publish(
    kcp: KubeClient, ns: str, registry: LocalRegistry, module: str, version: str, bad: bool
) -> None:
    raw, cr = module_files(module, version)
    published = await publish_module(
        registry, module, version, namespace=ns, manifest=unschedulable(raw) if bad else raw, default_cr=cr
    )
    await kcp.create(MODULE_TEMPLATES, published.template)


async def available(kcp: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        deployment = await kcp.get(DEPLOYMENTS, name, namespace)
    except NotFound:
        return None
    conditions = (deployment.get("status") or {}).get("conditions") or []
    ok = any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)
    return deployment if ok else None


async def test_unavailable_deployment_halts_and_reverts_on_a_living_runtime(
    living_ns: tuple[KubeClient, str], oci_registry: LocalRegistry, module_name: str, tmp_path: Path
) -> None:
    kcp, ns = living_ns
    module, installed_ns = module_name, f"{module_name}-system"
    with contextlib.suppress(AlreadyExists):
        await kcp.create(NAMESPACES, {"metadata": {"name": installed_ns}})
    await publish(kcp, ns, oci_registry, module, OLD, bad=False)
    await publish(kcp, ns, oci_registry, module, NEW, bad=True)
    await kcp.create(
        MODULE_RELEASE_METAS,
        release_meta(ns, {"regular": OLD}, module=module, component=component_of(module)),
    )
    config = operator_config(
        ns,
        **rollout_config(
            ns,
            manifest_controller_enabled=True,
            manifest_processing_interval=0.2,
            oci_insecure_registries=(oci_registry.host,),
            module_cache_dir=tmp_path / "module-cache",
        ),
    )
    try:
        async with running_operator(kcp, config):
            await kcp.create(
                KYMAS,
                {
                    "metadata": {
                        "name": "canary",
                        "namespace": ns,
                        "labels": {names.SYNC_LABEL: "false", RING_LABEL: "canary"},
                    },
                    "spec": {"channel": "regular", "modules": [{"name": module}]},
                },
            )
            await eventually(
                lambda: available(kcp, installed_ns, deployment_name(module, OLD)),
                "1.0.0's Deployment available on the kwok nodes",
                within=60,
            )
            await create_policy(kcp, ns, module=module, deadline="8s", soak="1s", on_failure="Revert")
            spec = {"channels": [{"channel": "regular", "version": NEW}]}
            await kcp.patch(MODULE_RELEASE_METAS, module, {"spec": spec}, ns)
            name = f"{module}-regular-{NEW}"
            await eventually(lambda: run_in_phase(kcp, ns, name, "Reverting"), "the run Reverting", within=60)
            run = await eventually(
                lambda: run_in_phase(kcp, ns, name, "Reverted"), "the run Reverted", within=90
            )
            # the progress deadline fails it, unless the Manifest controller reported an Error first
            assert run["status"]["haltReason"].startswith("wave canary: 1 failed"), run["status"][
                "haltReason"
            ]
            assert run["status"]["revert"]["wave"] == 0
            back = await eventually(
                lambda: available(kcp, installed_ns, deployment_name(module, OLD)),
                "1.0.0's Deployment available again",
                within=60,
            )
            assert back["spec"]["template"]["spec"].get("nodeSelector") is None
            reasons = [e["reason"] for e in await events_of(kcp, ns, "canary")]
            assert reasons.count("ModuleRevertedByRollout") == 1, reasons
    finally:
        samples = samples_of(module)
        with contextlib.suppress(NotFound):
            for cr in (await kcp.list_all(samples)).items:
                meta = cr["metadata"]
                await kcp.patch(
                    samples, meta["name"], {"metadata": {"finalizers": None}}, meta.get("namespace")
                )
        with contextlib.suppress(NotFound):
            await kcp.delete(CRDS, f"{samples.plural}.{samples.group}")
        with contextlib.suppress(NotFound):
            await kcp.delete(NAMESPACES, installed_ns)
