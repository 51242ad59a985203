"""A module made by the CLI installs through the operator, end to end, and `kyma install` installs one
into a single cluster with the operator's reconcilers in-process (issue 14 item 9).

Real everything: the `kyma` console script as processes, the OCI registry (distribution), the KCP and
SKR API servers, the operator (Kyma + Manifest controllers, listener) and the runtime's agent. No
kubelet runs here, so the test reports the module's Deployment Available once the operator created
it, as a Deployment controller would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import DEPLOYMENTS, NAMESPACES
from localrun.kcp import SKR_CRD_PLURALS
from tests.controlplane.cluster import APIServer
from tests.controlplane.crds import apply_crds
from tests.integration.cli.conftest import REPO, write_module_source
from tests.integration.kyma_operator.controllers.manifest.module import deployment_available
from tests.integration.kyma_operator.modules_env import module_env
from tests.polling import eventually
from tests.registry.server import LocalRegistry


async def cli(cwd: Path, *args: str, limit: float = 180.0) -> tuple[int, str, str]:
    """Run the `kyma` CLI as its own process (what a user types), without blocking the event loop."""
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}:{REPO}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kyma_operator.cli",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), limit)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def act_as_deployment_controller(client: KubeClient, name: str, namespace: str) -> None:
    """Report the Deployment Available once it exists (no kubelet runs on these API servers)."""

    async def created() -> bool:
        try:
            await client.get(DEPLOYMENTS, name, namespace)
        except NotFound:
            return False
        return True

    await eventually(created, f"Deployment {namespace}/{name} created by the operator", within=90)
    await client.patch_status(DEPLOYMENTS, name, deployment_available(), namespace)


async def ensure_namespace(client: KubeClient, name: str) -> None:
    with contextlib.suppress(AlreadyExists):
        await client.create(NAMESPACES, {"metadata": {"name": name}})


async def publish(cwd: Path, module: str, registry: LocalRegistry, namespace: str, kcp: APIServer) -> None:
    """create -> push (one step) -> template -> deploy, as a module author does.

    The module's own Namespace is left out of its manifest (and created by the test): without a
    kube-controller-manager here a deleted Namespace would stay Terminating and block the uninstall.
    """
    config = write_module_source(cwd / "src", module)
    manifest = cwd / "src" / "manifest.yaml"
    documents = [d for d in yaml.safe_load_all(manifest.read_text()) if d and d.get("kind") != "Namespace"]
    manifest.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    base = f"{registry.host}/modules"
    code, _out, err = await cli(
        cwd, "module", "create", "-c", str(config), "-d", "built", "-r", base, "--insecure"
    )
    assert code == 0, err
    code, _out, err = await cli(
        cwd, "module", "template", "built", "-n", namespace, "--output", "catalog.yaml"
    )
    assert code == 0, err
    code, _out, err = await cli(
        cwd, "module", "deploy", "catalog.yaml", "--kubeconfig", str(kcp.kubeconfig_path)
    )
    assert code == 0, err


async def test_cli_module_installs_through_the_operator_and_is_disabled_again(
    kcp_client: KubeClient,
    kcp_namespace: str,
    kcp_crds: APIServer,
    skr_client: KubeClient,
    skr: APIServer,
    oci_registry: LocalRegistry,
    module_name: str,
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    apply_crds(skr.kubeconfig_path, plurals=SKR_CRD_PLURALS)
    await publish(tmp_path, module_name, oci_registry, ns, kcp_crds)
    await ensure_namespace(skr_client, "kyma-system")  # where the module's default CR goes
    await ensure_namespace(skr_client, f"{module_name}-system")
    async with module_env(
        kcp_client,
        ns,
        skr_client,
        skr,
        tmp_path,
        manifest_controller_enabled=True,
        manifest_processing_interval=0.2,
        oci_insecure_registries=(oci_registry.host,),
        module_cache_dir=tmp_path / "module-cache",
    ) as env:
        kc = str(skr.kubeconfig_path)
        code, out, err = await cli(
            tmp_path, "module", "list", "--kubeconfig", kc, "-n", env.sync_ns, "-o", "json"
        )
        assert code == 0, err
        (row,) = [r for r in json.loads(out) if r["name"] == module_name]
        assert row["channels"] == ["regular:1.0.0"] and row["enabled"] is False  # the synced catalog

        kubelet = asyncio.create_task(
            act_as_deployment_controller(
                skr_client, f"{module_name}-controller-manager", f"{module_name}-system"
            )
        )
        code, out, err = await cli(
            tmp_path, "module", "enable", module_name, "--kubeconfig", kc, "-n", env.sync_ns, "--wait", "-q"
        )
        await kubelet
        assert code == 0, err
        assert f"module {module_name} is Ready" in out
        manifests = await kcp_client.list_all(
            MANIFESTS, ns, label_selector=f"{names.MODULE_NAME_LABEL}={module_name}"
        )
        (manifest,) = manifests.items
        assert manifest["status"]["state"] == "Ready"
        code, out, err = await cli(
            tmp_path, "module", "list", "--kubeconfig", kc, "-n", env.sync_ns, "-o", "json"
        )
        (row,) = [r for r in json.loads(out) if r["name"] == module_name]
        assert (row["enabled"], row["state"], row["installed"]) == (True, "Ready", "1.0.0")

        code, out, err = await cli(
            tmp_path,
            "module",
            "disable",
            module_name,
            "--kubeconfig",
            kc,
            "-n",
            env.sync_ns,
            "--wait",
            "-q",
            "--timeout",
            "60",
        )
        assert code == 0, (err, [r.line() for r in env.running.manifest_reports[-3:]])
        assert f"module {module_name} removed" in out
        await eventually(
            lambda: _gone(skr_client, f"{module_name}-controller-manager", f"{module_name}-system"),
            "the module's Deployment uninstalled from the runtime",
        )


async def _gone(client: KubeClient, name: str, namespace: str) -> bool:
    try:
        await client.get(DEPLOYMENTS, name, namespace)
    except NotFound:
        return True
    return False


async def test_kyma_install_runs_the_reconcilers_in_process_until_ready(
    skr_b_client: KubeClient,
    skr_b: APIServer,
    kcp_crds: APIServer,
    oci_registry: LocalRegistry,
    module_name: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    """One cluster, no operator deployment: `kyma install` installs the module there and exits."""
    namespace = unique_name
    # the catalog kinds must exist for `kyma module deploy`; the Manifest CRD comes from `kyma install`
    apply_crds(skr_b.kubeconfig_path, plurals=SKR_CRD_PLURALS)
    await ensure_namespace(skr_b_client, namespace)
    await ensure_namespace(skr_b_client, "kyma-system")
    await ensure_namespace(skr_b_client, f"{module_name}-system")
    await publish(tmp_path, module_name, oci_registry, namespace, skr_b)
    kc = str(skr_b.kubeconfig_path)
    kubelet = asyncio.create_task(
        act_as_deployment_controller(
            skr_b_client, f"{module_name}-controller-manager", f"{module_name}-system"
        )
    )
    code, out, err = await cli(
        tmp_path,
        "install",
        "--kubeconfig",
        kc,
        "--module",
        f"{module_name}@regular",
        "-n",
        namespace,
        "--insecure-registry",
        oci_registry.host,
        "--timeout",
        "120",
    )
    await kubelet
    assert code == 0, err
    assert f"installed: {module_name} Ready in {namespace}" in out
    kyma = await skr_b_client.get(KYMAS, "default", namespace)
    assert kyma["metadata"]["labels"][names.SYNC_LABEL] == "false"
    # the status says which spec it answers (what `--wait` waits for): every condition observed it
    conditions = kyma["status"]["conditions"]
    assert conditions and {c["observedGeneration"] for c in conditions} == {kyma["metadata"]["generation"]}
    (manifest,) = (await skr_b_client.list_all(MANIFESTS, namespace)).items
    assert manifest["spec"]["remote"] is False and manifest["status"]["state"] == "Ready"
    # again: nothing to do, Ready at once
    code, out, err = await cli(
        tmp_path,
        "install",
        "--kubeconfig",
        kc,
        "--module",
        module_name,
        "-n",
        namespace,
        "--insecure-registry",
        oci_registry.host,
        "-q",
    )
    assert code == 0, err
    # a module the catalog does not have: one clear line, exit 1
    code, out, err = await cli(
        tmp_path,
        "install",
        "--kubeconfig",
        kc,
        "--module",
        "no-such-module",
        "-n",
        namespace,
        "-q",
        "--timeout",
        "60",
    )
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert (
        lines[-1].startswith("Error: module no-such-module is in Error") and "ModuleReleaseMeta" in lines[-1]
    )
    assert await _kyma_modules(skr_b_client, namespace) >= {module_name, "no-such-module"}


async def _kyma_modules(client: KubeClient, namespace: str) -> set[str]:
    kyma: dict[str, Any] = await client.get(KYMAS, "default", namespace)
    return {m["name"] for m in kyma["spec"]["modules"]}
