"""``make run RUN_ARGS=--module``: a sample module from a local OCI registry, installed and repaired.

Why: the local run shows the module path end to end, like it shows the Kyma path: a real registry
(distribution, plain HTTP on 127.0.0.1, built like the test suite's), a module published as an OCM
component version by the ``modules`` library, its ModuleTemplate and ModuleReleaseMeta in KCP, the
module enabled in the first runtime's Kyma, the Kyma controller creating its Manifest and the
Manifest controller pulling and installing it; with ``--once`` a module object is then deleted in
the runtime and restored by the agent's event. The module is small: a ConfigMap and a
ServiceAccount in the sync namespace.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.moduleresolution import manifest_name
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CONFIGMAPS
from tests.registry.modules import publish_module
from tests.registry.server import LocalRegistry

MODULE = "sample"
CONFIGMAP = "sample-module-config"


def raw_manifest(namespace: str) -> bytes:
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": namespace},
            "data": {"greeting": "hello from the sample module"},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "sample-module", "namespace": namespace},
        },
    ]
    return yaml.safe_dump_all(objects, sort_keys=False).encode()


@dataclass(frozen=True)
class InstalledModule:
    manifest: str
    namespace: str
    """KCP namespace of the Manifest."""
    runtime_namespace: str


async def install_sample_module(
    registry: LocalRegistry,
    kcp: KubeClient,
    skr: KubeClient,
    kyma: str,
    *,
    kcp_namespace: str,
    sync_namespace: str,
    say: Callable[[str], None],
) -> InstalledModule:
    """Publish the module, put it into the KCP catalog, enable it in the runtime's Kyma (as a
    runtime admin would) and wait until its Manifest is Ready."""
    published = await publish_module(
        registry,
        MODULE,
        "1.0.0",
        namespace=kcp_namespace,
        manifest=raw_manifest(sync_namespace),
        with_default_cr=False,
    )
    source = published.source
    say(f"module {MODULE} 1.0.0 pushed to {source.repo}/{source.name} (raw manifest {source.ref[:19]}...)")
    for resource, body in (
        (MODULE_TEMPLATES, published.template),
        (MODULE_RELEASE_METAS, published.release_meta),
    ):
        await kcp.apply(resource, body, field_manager="localrun")
    say(f"catalog: ModuleTemplate {published.template['metadata']['name']} and ModuleReleaseMeta {MODULE}")
    await skr.patch(
        KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": {"modules": [{"name": MODULE}]}}, sync_namespace
    )
    say(f"enabled module {MODULE} in the runtime's Kyma {sync_namespace}/{names.DEFAULT_REMOTE_KYMA_NAME}")
    name = manifest_name(kyma, str(published.release_meta["spec"]["ocmComponentName"]), MODULE)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        try:
            obj = await kcp.get(MANIFESTS, name, kcp_namespace)
        except NotFound:
            obj = {}
        if (obj.get("status") or {}).get("state") == "Ready":
            say(f"Manifest {kcp_namespace}/{name} is Ready: module {MODULE} installed into the runtime")
            return InstalledModule(name, kcp_namespace, sync_namespace)
        await asyncio.sleep(0.05)
    raise TimeoutError(f"Manifest {kcp_namespace}/{name} did not become Ready within 30s")


async def demonstrate_drift(skr: KubeClient, module: InstalledModule, say: Callable[[str], None]) -> float:
    """Delete the module's ConfigMap in the runtime; seconds until it is back."""
    say(
        f"--once: deleting ConfigMap {module.runtime_namespace}/{CONFIGMAP} of module {MODULE} in the runtime"
    )
    started = time.monotonic()
    await skr.delete(CONFIGMAPS, CONFIGMAP, module.runtime_namespace)
    deadline = started + 10.0
    while time.monotonic() < deadline:
        try:
            await skr.get(CONFIGMAPS, CONFIGMAP, module.runtime_namespace)
        except NotFound:
            await asyncio.sleep(0.005)
            continue
        elapsed = time.monotonic() - started
        where = f"{module.namespace}/{module.manifest}"
        say(f"--once: ConfigMap restored by Manifest {where} after {elapsed * 1000:.0f} ms")
        return elapsed
    raise TimeoutError("the deleted module ConfigMap was not restored within 10s")
