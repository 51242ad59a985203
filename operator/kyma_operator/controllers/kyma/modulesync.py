"""One Manifest per enabled module of a Kyma, and the Kyma's ``status.modules`` from them.

Why this exists: the module half of the Kyma reconcile, kept out of ``reconciler`` so it can be
driven and tested on its own against a real API server. Per reconcile it reads the Kyma namespace's
ModuleReleaseMetas and ModuleTemplates and the Kyma's Manifests (label ``kyma-name``), resolves every
module (``moduleresolution``), server-side applies a Manifest (field manager ``lifecycle-manager``)
only when its version, channel or template generation changed, deletes the Manifests of disabled or
no longer allowed modules, and returns the new ``status.modules`` entries: a disabled module's
entry is dropped as soon as its Manifest is gone (upstream keeps it until the next poll, #1762).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma, ModuleStatus, PartialMeta, TrackingObject
from kyma_operator.api.manifest import Manifest
from kyma_operator.api.meta import State
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.manifestbuild import ManifestBuildError, desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved, Unresolved, resolve
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.kube import KubeClient

# Upstream's field manager for the Manifests the Kyma controller writes.
FIELD_MANAGER = names.OPERATOR_NAME


@dataclass
class ModuleSyncResult:
    """What one pass did: the new ``status.modules`` and the Manifest writes it made."""

    modules: list[ModuleStatus] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _tracking(obj: Manifest | ModuleTemplate) -> TrackingObject:
    return TrackingObject(
        api_version=obj.api_version or obj.RESOURCE.api_version,
        kind=obj.kind or obj.RESOURCE.kind,
        metadata=PartialMeta(name=obj.name, namespace=obj.namespace, generation=obj.metadata.generation),
    )


def entry_for(resolved: Resolved, manifest: Manifest) -> ModuleStatus:
    """Status entry of a module whose Manifest exists: its state is the Manifest's (Processing until
    the Manifest controller reports one)."""
    state = manifest.state() or State.PROCESSING
    if state is State.EMPTY:
        state = State.PROCESSING
    return ModuleStatus(
        name=resolved.module,
        state=state,
        fqdn=resolved.ocm_component_name,
        ocm_component_name=resolved.ocm_component_name,
        channel=resolved.channel,
        version=resolved.version,
        manifest=_tracking(manifest),
        template=_tracking(resolved.template),
    )


def needs_apply(
    existing: Manifest | None, desired: Manifest, template: ModuleTemplate, previous: ModuleStatus | None
) -> bool:
    """Apply only on a new Manifest or a change of version, channel or template generation."""
    if existing is None:
        return True
    if existing.spec.version != desired.spec.version or existing.channel() != desired.channel():
        return True
    recorded = previous.template.metadata.generation if previous and previous.template else None
    return recorded != template.metadata.generation


def apply_body(manifest: Manifest) -> dict[str, Any]:
    """The fields the Kyma controller owns (no status, no unset fields)."""
    body: dict[str, Any] = manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
    body.pop("status", None)
    return body


class ModuleSync:
    """Runs the module half of one Kyma reconcile against the KCP API server."""

    def __init__(self, client: KubeClient, *, sync_namespace: str = "kyma-system") -> None:
        self.client = client
        self.sync_namespace = sync_namespace

    async def sync(self, kyma: Kyma) -> ModuleSyncResult:
        ns = kyma.namespace
        metas = {
            m.name: m
            for m in map(
                ModuleReleaseMeta.from_object, (await self.client.list_all(MODULE_RELEASE_METAS, ns)).items
            )
        }
        templates = {
            t.name: t
            for t in map(ModuleTemplate.from_object, (await self.client.list_all(MODULE_TEMPLATES, ns)).items)
        }
        manifests: dict[str, Manifest] = {}
        selector = f"{names.KYMA_NAME_LABEL}={kyma.name}"
        for item in (await self.client.list_all(MANIFESTS, ns, label_selector=selector)).items:
            manifest = Manifest.from_object(item)
            owner_module = manifest.module_name()
            if owner_module:
                manifests[owner_module] = manifest
        result = ModuleSyncResult()
        enabled = {m.name for m in kyma.spec.modules}
        for module in kyma.spec.modules:
            previous = kyma.status.module(module.name)
            channel = kyma.desired_channel(module)
            resolution = resolve(kyma, module.name, channel, metas.get(module.name), templates, previous)
            existing = manifests.get(module.name)
            if isinstance(resolution, Unresolved):
                if resolution.template_not_allowed and existing is not None:
                    await self._delete(existing, result)
                result.modules.append(_unresolved_entry(resolution, previous))
                continue
            try:
                desired = desired_manifest(kyma, resolution, sync_namespace=self.sync_namespace)
            except ManifestBuildError as exc:
                result.modules.append(
                    ModuleStatus(name=module.name, state=State.ERROR, channel=channel, message=str(exc))
                )
                continue
            current = existing
            if current is None or needs_apply(existing, desired, resolution.template, previous):
                applied = await self.client.apply(MANIFESTS, apply_body(desired), field_manager=FIELD_MANAGER)
                current = Manifest.from_object(applied)
                result.applied.append(desired.name)
            result.modules.append(entry_for(resolution, current))
        for module_name, manifest in manifests.items():
            if module_name in enabled:
                continue
            if manifest.metadata.deletion_timestamp is None:
                await self._delete(manifest, result)
            previous = kyma.status.module(module_name)
            if previous is not None:
                # Gone once the Manifest controller has removed the module; until then Deleting.
                result.modules.append(previous.model_copy(update={"state": State.DELETING}))
        return result

    async def _delete(self, manifest: Manifest, result: ModuleSyncResult) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(MANIFESTS, manifest.name, manifest.namespace)
            result.deleted.append(manifest.name)


def _unresolved_entry(resolution: Unresolved, previous: ModuleStatus | None) -> ModuleStatus:
    if resolution.keep_previous and previous is not None:
        return previous.model_copy(update={"state": resolution.state, "message": resolution.message})
    return ModuleStatus(
        name=resolution.module, state=resolution.state, channel=resolution.channel, message=resolution.message
    )
