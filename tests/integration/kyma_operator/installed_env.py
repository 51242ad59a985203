"""Both controllers installing a real module from the real registry, for upstream's e2e scenarios
that span the Kyma and the Manifest controller (issue 25 items 4 and 5).

``module_env`` (real KCP and SKR API servers, the operator, the runtime's real agent) with the
Manifest controller on, and the module published to the session's OCI registry as ``kyma module
push`` would: one ModuleTemplate per version, a ModuleReleaseMeta naming the channels. As upstream's
template-operator, every version has its own manager Deployment name (``deployment(version)``), so
a test sees which version is installed. The module's Namespace is created here, not by the module
(no kube-controller-manager runs on these API servers, a deleted Namespace would stay Terminating);
no kubelet either, so ``make_ready`` reports a Deployment Available as a Deployment controller would.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kyma_operator.api.resources import MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.runtime.errors import AlreadyExists, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CRDS, DEPLOYMENTS, NAMESPACES, Resource
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.controllers.manifest.module import deployment_available
from tests.integration.kyma_operator.modules_env import ModuleEnv, module_env, release_meta
from tests.polling import eventually
from tests.registry.modules import publish_module, sample_manifests
from tests.registry.server import LocalRegistry


def component_of(module: str) -> str:
    return f"kyma-project.io/module/{module}"


@dataclass
class Installed:
    env: ModuleEnv
    module: str

    @property
    def namespace(self) -> str:
        """The module's own namespace in the runtime (its manager Deployment)."""
        return f"{self.module}-system"

    @property
    def samples(self) -> Resource:
        return samples_of(self.module)

    @property
    def default_cr(self) -> str:
        return f"{self.module}-default"

    def deployment(self, version: str) -> str:
        return deployment_name(self.module, version)

    def manifest_name(self) -> str:
        return self.env.manifest_name(self.module, component_of(self.module))

    async def manifest(self) -> dict[str, Any] | None:
        return await self.env.manifest(self.manifest_name())

    async def manifest_gone(self) -> bool:
        return await self.manifest() is None

    async def exists(self, res: Resource, name: str, namespace: str | None) -> bool:
        try:
            await self.env.skr.get(res, name, namespace)
        except NotFound:
            return False
        return True

    async def make_ready(self, version: str) -> None:
        """Act as the Deployment controller once the operator created the version's Deployment."""
        name = self.deployment(version)
        await eventually(lambda: self.exists(DEPLOYMENTS, name, self.namespace), f"Deployment {name} created")
        await self.env.skr.patch_status(DEPLOYMENTS, name, deployment_available(), self.namespace)

    async def wait_manifest_state(self, state: str, within: float = 30.0) -> dict[str, Any]:
        return await self.env.wait_manifest(
            lambda m: (m.get("status") or {}).get("state") == state,
            f"Manifest {state}",
            self.manifest_name(),
            within=within,
        )

    async def wait_kyma_state(self, state: str, within: float = 30.0) -> dict[str, Any]:
        return await self.env.wait_kyma(
            lambda k: (k.get("status") or {}).get("state") == state, f"Kyma {state}", within=within
        )

    async def cr_being_deleted(self) -> bool:
        """The module's default CR has a deletion timestamp (upstream ``ErrDeletionTimestampFound``)."""
        try:
            cr = await self.env.skr.get(self.samples, self.default_cr, self.env.sync_ns)
        except NotFound:
            return False
        return bool(cr["metadata"].get("deletionTimestamp"))

    async def set_cr_finalizers(self, finalizers: list[str]) -> None:
        patch = {"metadata": {"finalizers": finalizers or None}}
        await self.env.skr.patch(self.samples, self.default_cr, patch, self.env.sync_ns)


def samples_of(module: str) -> Resource:
    """The module's CRD (its default CR's kind), as ``sample_manifests`` names it."""
    kind = "".join(part.capitalize() for part in module.split("-"))
    return Resource("operator.kyma-project.io", "v1alpha1", module.replace("-", "") + "s", kind)


def deployment_name(module: str, version: str) -> str:
    return f"{module}-controller-manager-v{version.replace('.', '-')}"


def module_files(module: str, version: str) -> tuple[bytes, bytes]:
    """(raw manifest, default CR): the module's CRD and its manager Deployment named after the
    version; the default CR without a namespace (it goes to the sync namespace)."""
    raw, cr = sample_manifests(module)
    objects = [o for o in yaml.safe_load_all(raw) if o and o["kind"] != "Namespace"]
    for obj in objects:
        if obj["kind"] == "Deployment":
            obj["metadata"]["name"] = deployment_name(module, version)
    default_cr = yaml.safe_load(cr)
    default_cr["metadata"].pop("namespace", None)
    return yaml.safe_dump_all(objects, sort_keys=True).encode(), yaml.safe_dump(default_cr).encode()


async def publish_catalog(
    kcp: KubeClient, ns: str, registry: LocalRegistry, module: str, channels: dict[str, str]
) -> None:
    """Publish every version of ``channels`` (and its ModuleTemplate in KCP), then the release meta."""
    for version in sorted(set(channels.values())):
        await publish_version(kcp, ns, registry, module, version)
    await kcp.create(
        MODULE_RELEASE_METAS, release_meta(ns, channels, module=module, component=component_of(module))
    )


async def publish_version(
    kcp: KubeClient, ns: str, registry: LocalRegistry, module: str, version: str
) -> None:
    raw, cr = module_files(module, version)
    published = await publish_module(registry, module, version, namespace=ns, manifest=raw, default_cr=cr)
    await kcp.create(MODULE_TEMPLATES, published.template)


async def set_channels(kcp: KubeClient, ns: str, module: str, channels: dict[str, str]) -> None:
    spec = {"channels": [{"channel": c, "version": v} for c, v in channels.items()]}
    await kcp.patch(MODULE_RELEASE_METAS, module, {"spec": spec}, ns)


@contextlib.asynccontextmanager
async def installed_env(
    kcp: KubeClient,
    ns: str,
    skr: KubeClient,
    skr_server: APIServer,
    registry: LocalRegistry,
    tmp_path: Path,
    module: str,
    **overrides: Any,
) -> AsyncIterator[Installed]:
    installed_ns = f"{module}-system"
    with contextlib.suppress(AlreadyExists):
        await skr.create(NAMESPACES, {"metadata": {"name": installed_ns}})
    values: dict[str, Any] = {
        "manifest_controller_enabled": True,
        "manifest_processing_interval": 0.2,
        "oci_insecure_registries": (registry.host,),
        "module_cache_dir": tmp_path / "module-cache",
        **overrides,
    }
    try:
        async with module_env(kcp, ns, skr, skr_server, tmp_path, **values) as env:
            yield Installed(env, module)
    finally:
        samples = samples_of(module)
        with contextlib.suppress(NotFound):
            for cr in (await skr.list_all(samples)).items:
                meta = cr["metadata"]
                await skr.patch(
                    samples, meta["name"], {"metadata": {"finalizers": None}}, meta.get("namespace")
                )
        with contextlib.suppress(NotFound):
            await skr.delete(CRDS, f"{samples.plural}.{samples.group}")
        with contextlib.suppress(NotFound):
            await skr.delete(NAMESPACES, installed_ns)
