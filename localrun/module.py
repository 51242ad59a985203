"""``--module``: a sample module published by the real ``kyma module`` commands, in two channels.

Why: ``make run`` is the product, so the module a person plays with must reach the catalog the way
a module author's would: module config and manifests written to files (``.local/run/sample-module``),
``kyma module create -r`` building and pushing each version to the local OCI registry, ``kyma module
template`` writing the ModuleTemplate and ModuleReleaseMeta, ``kyma module deploy`` putting them into
KCP (its release-meta merge gives one ModuleReleaseMeta with both channels). The commands run as
subprocesses of the console script's module (``python -m kyma_operator.cli``), exactly as typed in a
shell. The module is small but complete: a CRD, an operator Deployment (made Ready by the living
cluster's kwok nodes), a ConfigMap, and a default CR of the CRD's kind; version 1.1.0 (channel
``fast``) changes the Deployment's image and the ConfigMap, so an upgrade is visible.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CONFIGMAPS
from localrun.kcp import KCP_NAMESPACE, RUN_DIR, SYNC_NAMESPACE
from localrun.output import Say
from tests.controlplane.binaries import REPO_ROOT
from tests.registry.server import LocalRegistry

MODULE = "sample"
COMPONENT = f"kyma-project.io/module/{MODULE}"
MODULE_NAMESPACE = f"{MODULE}-system"
DEPLOYMENT = f"{MODULE}-controller-manager"
CONFIGMAP = f"{MODULE}-config"
RELEASES = (("1.0.0", "regular"), ("1.1.0", "fast"))
"""(version, channel) published, in order."""
MODULE_DIR = RUN_DIR / "sample-module"


def _manifest(version: str) -> list[dict[str, Any]]:
    group = "operator.kyma-project.io"
    labels = {"app.kubernetes.io/name": MODULE}
    return [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"samples.{group}"},
            "spec": {
                "group": group,
                "names": {
                    "kind": "Sample",
                    "listKind": "SampleList",
                    "plural": "samples",
                    "singular": "sample",
                },
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1alpha1",
                        "served": True,
                        "storage": True,
                        "subresources": {"status": {}},
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MODULE_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": MODULE_NAMESPACE},
            "data": {"greeting": f"hello from the sample module {version}"},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": DEPLOYMENT, "namespace": MODULE_NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [{"name": "manager", "image": f"example.invalid/{MODULE}:{version}"}]
                    },
                },
            },
        },
    ]


def _default_cr() -> dict[str, Any]:
    return {
        "apiVersion": "operator.kyma-project.io/v1alpha1",
        "kind": "Sample",
        "metadata": {"name": f"{MODULE}-default", "namespace": SYNC_NAMESPACE},
        "spec": {"replicas": 1},
    }


def write_module_sources(version: str, channel: str, directory: Path) -> Path:
    """The files a module author keeps in their repository; returns the module config's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.yaml").write_text(yaml.safe_dump_all(_manifest(version), sort_keys=False))
    (directory / "default-cr.yaml").write_text(yaml.safe_dump(_default_cr(), sort_keys=False))
    config = {
        "name": COMPONENT,
        "version": version,
        "channel": channel,
        "manifest": "manifest.yaml",
        "defaultCR": "default-cr.yaml",
        "repository": f"https://example.invalid/{MODULE}",
        "documentation": f"https://example.invalid/{MODULE}/README.md",
        "manager": {
            "group": "apps",
            "version": "v1",
            "kind": "Deployment",
            "name": DEPLOYMENT,
            "namespace": MODULE_NAMESPACE,
        },
    }
    path = directory / "module-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


async def kyma_cli(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``kyma <args>`` (the console script's module) and return its stdout; raise on failure."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kyma_operator.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO_ROOT,
        env=env,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"kyma {' '.join(args)} failed: {err.decode().strip() or out.decode().strip()}")
    return out.decode()


async def _publish_release(registry: str, version: str, channel: str, say: Say) -> Path:
    directory = MODULE_DIR / version
    config = write_module_sources(version, channel, directory)
    archive = directory / "archive"
    catalog = directory / "catalog.yaml"
    await kyma_cli(
        "module", "create", "-c", str(config), "-d", str(archive), "-r", registry, "--insecure", "-q"
    )
    await kyma_cli("module", "template", str(archive), "-r", registry, "--output", str(catalog))
    say(f"kyma module create + push: {COMPONENT}:{version} -> {registry} (channel {channel})")
    return catalog


async def publish_sample_module(registry: LocalRegistry, kcp_kubeconfig: Path, say: Say) -> None:
    """Publish both releases and deploy their catalog objects into KCP (see the module docstring)."""
    started = time.monotonic()
    base = f"{registry.host}/modules"
    catalogs = await asyncio.gather(*(_publish_release(base, v, ch, say) for v, ch in RELEASES))
    for catalog in catalogs:  # in order: each deploy merges its channel into the release meta
        await kyma_cli("module", "deploy", str(catalog), "--kubeconfig", str(kcp_kubeconfig))
    channels = ", ".join(f"{ch} -> {v}" for v, ch in RELEASES)
    say(
        f"kyma module deploy: ModuleTemplates {', '.join(f'{MODULE}-{v}' for v, _ in RELEASES)} and "
        f"ModuleReleaseMeta {MODULE} ({channels}) in KCP {KCP_NAMESPACE} "
        f"[{time.monotonic() - started:.1f} s; sources in {MODULE_DIR.relative_to(REPO_ROOT)}]"
    )


def module_manifest(kyma: str) -> str:
    """Name of the Manifest the Kyma controller creates for the sample module in ``kyma``."""
    return manifest_name(kyma, COMPONENT, MODULE)


def module_status(runtime_kyma: dict[str, Any]) -> dict[str, Any] | None:
    for entry in (runtime_kyma.get("status") or {}).get("modules") or []:
        if entry.get("name") == MODULE:
            return dict(entry)
    return None


async def enable_module(skr: KubeClient, channel: str | None = None) -> None:
    """As ``kyma module enable`` does: the module in the runtime Kyma's ``spec.modules``."""
    entry: dict[str, Any] = {"name": MODULE, "customResourcePolicy": "CreateAndDelete"}
    if channel:
        entry["channel"] = channel
    await skr.patch(KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": {"modules": [entry]}}, SYNC_NAMESPACE)


async def wait_manifest_ready(kcp: KubeClient, kyma: str, say: Say, deadline: float = 60.0) -> str:
    name = module_manifest(kyma)
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        try:
            obj = await kcp.get(MANIFESTS, name, KCP_NAMESPACE)
        except NotFound:
            obj = {}
        if (obj.get("status") or {}).get("state") == "Ready":
            say(f"Manifest {KCP_NAMESPACE}/{name} is Ready: module {MODULE} installed into the runtime")
            return name
        await asyncio.sleep(0.05)
    raise TimeoutError(f"Manifest {KCP_NAMESPACE}/{name} did not become Ready within {deadline:.0f}s")


async def demonstrate_drift(skr: KubeClient, manifest: str, say: Say) -> float:
    """``--once``: delete the module's ConfigMap in the runtime; seconds until it is back."""
    say(f"--once: deleting ConfigMap {MODULE_NAMESPACE}/{CONFIGMAP} of module {MODULE} in the runtime")
    started = time.monotonic()
    await skr.delete(CONFIGMAPS, CONFIGMAP, MODULE_NAMESPACE)
    deadline = started + 10.0
    while time.monotonic() < deadline:
        try:
            await skr.get(CONFIGMAPS, CONFIGMAP, MODULE_NAMESPACE)
        except NotFound:
            await asyncio.sleep(0.005)
            continue
        elapsed = time.monotonic() - started
        say(
            f"--once: ConfigMap restored by Manifest {KCP_NAMESPACE}/{manifest} after {elapsed * 1000:.0f} ms"
        )
        return elapsed
    raise TimeoutError("the deleted module ConfigMap was not restored within 10s")


def session_text(runtime: str, kcp_kubeconfig: Path, skr_kubeconfig: Path) -> str:
    """The copy-paste session printed once everything runs (the README shows the same)."""
    skr = skr_kubeconfig.relative_to(REPO_ROOT)
    kcp = kcp_kubeconfig.relative_to(REPO_ROOT)
    return f"""\
try it in another shell (from {REPO_ROOT}):
  . .venv/bin/activate && export KUBECONFIG={skr}     # runtime {runtime}
  kyma module list                                    # {MODULE}: regular 1.0.0, fast 1.1.0
  kyma module enable {MODULE} --channel regular --wait     # until Ready
  kubectl -n {MODULE_NAMESPACE} delete deployment {DEPLOYMENT}     # a module object...
  kubectl -n {MODULE_NAMESPACE} get deployment {DEPLOYMENT}        # ...is back at once
  kyma module enable {MODULE} --channel fast --wait        # upgrade to 1.1.0
  kyma module list
  kyma module disable {MODULE} --wait                      # until removed
  KUBECONFIG={kcp} kubectl -n {KCP_NAMESPACE} get manifests,kymas   # the control plane's view"""
