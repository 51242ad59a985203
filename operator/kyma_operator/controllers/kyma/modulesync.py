"""One Manifest per enabled (and per mandatory) module of a Kyma, and ``status.modules`` from them.

Why this exists: the module half of the Kyma reconcile, kept out of ``reconciler`` so it can be
driven and tested on its own against a real API server. Per reconcile it reads the catalog
(``catalog.Catalog``, informers) and the Kyma's Manifests (the Manifest informer's index by label
``kyma-name``), resolves every module (``moduleresolution``) and then:

* server-side applies a Manifest (field manager ``lifecycle-manager``) only when the live one does
  not already hold everything the Kyma wants of it: a new module, a version, channel or template
  change, or a hand-edited spec (reset, upstream e2e 9); an unchanged module costs no request;
* deletes the Manifests of disabled or no longer allowed modules; a disabled module's entry stays
  (Deleting, then the Manifest's state) only while its Manifest exists and is dropped the moment
  it is gone (upstream keeps it until the next poll, #1762); while it exists it still follows its
  channel's version (``deletingupgrade``);
* installs mandatory modules (ModuleReleaseMeta ``mandatory.version``) in every Kyma: Manifest
  labelled ``mandatory-module=true``, no channel label, no status entry; deletes them once their
  release meta is gone or being deleted, then releases upstream's ``mandatory-module`` finalizer
  of that release meta (``mandatoryrelease``);
* unmanaged modules (``managed: false``): the Manifest gets ``is-unmanaged=true`` (the Manifest
  controller then strips our label from the runtime objects and leaves them), the entry is
  ``Unmanaged`` without references (upstream §4.6).

Fleet rollouts (docs/rollouts.md): given a rollout look-up (``rollouts``), a module whose channel
(or mandatory version) is under a ModuleRollout gets the version ``rollouts.target`` names for this
Kyma; the Manifest write carries the run's label (and, on a revert, its annotation), nothing else.

Bad input never stops the other modules: a duplicate module name, an invalid template or release
meta, a template without a raw-manifest layer each become that module's Error entry.

Descriptors: a template that embeds its descriptor (``spec.descriptor``) is read as is; one in the
upstream form (``spec.descriptor: {}``, what modulectl writes) gets it from the module registry
through ``descriptors.ModuleDescriptors`` (cached per component version and template generation, so
a reconcile at rest makes no registry request). A descriptor that cannot be fetched is that
module's Error entry naming component, version, registry and cause; an installed module keeps its
entry (and Manifest) with that Error until the fetch succeeds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import (
    CustomResourcePolicy,
    Kyma,
    Module,
    ModuleStatus,
    PartialMeta,
    TrackingObject,
)
from kyma_operator.api.manifest import Manifest
from kyma_operator.api.meta import InvalidObjectError, State
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.modulerollout import MANDATORY_CHANNEL
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import MANIFESTS
from kyma_operator.controllers.common.drift import up_to_date
from kyma_operator.controllers.kyma.catalog import Catalog
from kyma_operator.controllers.kyma.deletingupgrade import follow_release
from kyma_operator.controllers.kyma.descriptors import (
    DescriptorSourceConfig,
    DescriptorUnavailable,
    ModuleDescriptors,
)
from kyma_operator.controllers.kyma.maintenance import MaintenanceWindows, Waiting
from kyma_operator.controllers.kyma.mandatoryrelease import release_finalizers
from kyma_operator.controllers.kyma.manifestbuild import (
    ManifestBuildError,
    desired_manifest,
    is_cluster_scoped,
)
from kyma_operator.controllers.kyma.moduleresolution import Resolved, Unresolved, resolve, template_name
from kyma_operator.controllers.shared_informers import MANIFESTS_BY_KYMA_INDEX
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.rollouts.target import RolloutLookup, target
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient

# Upstream's field manager for the Manifests the Kyma controller writes.
FIELD_MANAGER = names.OPERATOR_NAME


@dataclass
class ModuleSyncResult:
    """What one pass did: the new ``status.modules`` and the Manifest writes it made."""

    modules: list[ModuleStatus] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    mandatory: dict[str, State] = field(default_factory=dict)
    """Mandatory module -> its Manifest's state (no status entry; for metrics and the log)."""
    wake_after: float | None = None
    """Seconds until the earliest maintenance window an upgrade waits for (None: none waits)."""
    reverted: list[tuple[str, str]] = field(default_factory=list)
    """(module, ModuleRollout) of each Manifest this pass wrote back to a rollout's ``fromVersion``
    (the caller records the Kyma event ``ModuleRevertedByRollout``)."""


def _tracking(obj: Manifest | ModuleTemplate) -> TrackingObject:
    return TrackingObject(
        api_version=obj.api_version or obj.RESOURCE.api_version,
        kind=obj.kind or obj.RESOURCE.kind,
        metadata=PartialMeta(name=obj.name, namespace=obj.namespace, generation=obj.metadata.generation),
    )


def _resource_tracking(manifest: Manifest, template: ModuleTemplate) -> TrackingObject | None:
    """The default CR reference: only with CreateAndDelete and a default CR (namespace "" when the
    template says the CR is cluster-scoped)."""
    resource = manifest.spec.resource
    if not resource or manifest.spec.custom_resource_policy is not CustomResourcePolicy.CREATE_AND_DELETE:
        return None
    metadata = resource.get("metadata") or {}
    return TrackingObject(
        api_version=str(resource.get("apiVersion") or ""),
        kind=str(resource.get("kind") or ""),
        metadata=PartialMeta(
            name=str(metadata.get("name") or ""),
            namespace="" if is_cluster_scoped(template) else str(metadata.get("namespace") or ""),
        ),
    )


def manifest_state(manifest: Manifest) -> State:
    """The module state a Manifest stands for: its own, Processing until it reports one for its
    current spec (a Ready written for the previous version is not Ready for the new one)."""
    state = manifest.state() or State.PROCESSING
    if state is State.EMPTY or not manifest.status_is_current():
        return State.PROCESSING
    return state


def entry_for(resolved: Resolved, manifest: Manifest) -> ModuleStatus:
    """Status entry of a module whose Manifest exists: its state is the Manifest's (Processing until
    the Manifest controller reports one)."""
    message = None
    if manifest.status is not None and manifest.status.last_operation is not None:
        message = manifest.status.last_operation.operation or None
    return ModuleStatus(
        name=resolved.module,
        state=manifest_state(manifest),
        fqdn=resolved.ocm_component_name,
        ocm_component_name=resolved.ocm_component_name,
        channel=resolved.channel,
        version=manifest.spec.version or resolved.version,
        message=message,
        manifest=_tracking(manifest),
        template=_tracking(resolved.template),
        resource=_resource_tracking(manifest, resolved.template),
    )


def unmanaged_entry(resolved: Resolved) -> ModuleStatus:
    return ModuleStatus(
        name=resolved.module,
        state=State.UNMANAGED,
        fqdn=resolved.ocm_component_name,
        ocm_component_name=resolved.ocm_component_name,
        channel=resolved.channel,
        version=resolved.version,
        message="module unmanaged: its resources stay in the runtime without the operator",
    )


def apply_body(manifest: Manifest) -> dict[str, Any]:
    """The fields the Kyma controller owns (no status, no unset fields)."""
    body: dict[str, Any] = manifest.model_dump(mode="json", by_alias=True, exclude_none=True)
    body.pop("status", None)
    return body


def needs_apply(existing: Manifest | None, live: dict[str, Any] | None, desired: Manifest) -> bool:
    """Apply when the Manifest is missing, being deleted, or does not hold what we want of it."""
    if existing is None or live is None:
        return True
    return not up_to_date(apply_body(desired), live)


class ModuleSync:
    """Runs the module half of one Kyma reconcile against the KCP API server."""

    def __init__(
        self,
        client: KubeClient,
        *,
        catalog: Catalog,
        manifests: Informer,
        sync_namespace: str = names.SKR_NAMESPACE,
        restricted_modules: Collection[str] = (),
        descriptors: ModuleDescriptors | None = None,
        maintenance: MaintenanceWindows | None = None,
        oci_registry: str | None = None,
        rollouts: RolloutLookup | None = None,
    ) -> None:
        """``oci_registry``: the registry (``host[/subpath]``) module descriptors are read from,
        written as the Manifests' ``install.source.repo`` like upstream (``None``: each
        descriptor's repository context); ``rollouts``: the ModuleRollout in force for a module
        and channel (``mandatory`` for mandatory modules; None: no rollouts, versions as today)."""
        self.client = client
        self.rollouts = rollouts
        self.maintenance = maintenance
        """Upgrades that require downtime wait for a window (None: no such gate)."""
        self.oci_registry = oci_registry
        self.catalog = catalog
        self.manifests = manifests
        self.descriptors = descriptors or ModuleDescriptors(client, DescriptorSourceConfig())
        """Descriptors of upstream-form templates (unconfigured: such a template is an Error)."""
        self.sync_namespace = sync_namespace
        self.restricted_modules = frozenset(restricted_modules)

    def manifests_of(self, kyma: Kyma) -> list[tuple[Manifest, dict[str, Any]]]:
        """The Kyma's Manifests from the informer (parsed; unparsable ones are skipped)."""
        found: list[tuple[Manifest, dict[str, Any]]] = []
        for obj in self.manifests.by_index(MANIFESTS_BY_KYMA_INDEX, kyma.name):
            if (obj.get("metadata") or {}).get("namespace") != kyma.namespace:
                continue
            with contextlib.suppress(InvalidObjectError):
                found.append((Manifest.from_object(obj), obj))
        return found

    def manifest_versions(self, kyma: Kyma) -> frozenset[tuple[str, str]]:
        """(name, resourceVersion) of the Kyma's Manifests in the informer, without parsing them:
        tells cheaply whether any of them changed since an earlier look."""
        versions: set[tuple[str, str]] = set()
        for obj in self.manifests.by_index(MANIFESTS_BY_KYMA_INDEX, kyma.name):
            meta = obj.get("metadata") or {}
            if meta.get("namespace") == kyma.namespace:
                versions.add((str(meta.get("name")), str(meta.get("resourceVersion"))))
        return frozenset(versions)

    async def sync(self, kyma: Kyma) -> ModuleSyncResult:
        module_manifests: dict[str, tuple[Manifest, dict[str, Any]]] = {}
        mandatory_manifests: dict[str, tuple[Manifest, dict[str, Any]]] = {}
        for manifest, obj in self.manifests_of(kyma):
            module = manifest.module_name()
            if not module:
                continue
            (mandatory_manifests if manifest.is_mandatory() else module_manifests)[module] = (manifest, obj)
        result = ModuleSyncResult()
        seen: set[str] = set()
        for entry in kyma.spec.modules:
            if entry.name in seen:
                result.modules = [m for m in result.modules if m.name != entry.name]
                result.modules.append(
                    ModuleStatus(
                        name=entry.name,
                        state=State.ERROR,
                        message=f"module {entry.name!r} is listed more than once in spec.modules; "
                        "list it once",
                    )
                )
                continue
            seen.add(entry.name)
            await self._sync_module(kyma, entry, module_manifests.get(entry.name), result)
        for module_name, (manifest, _) in module_manifests.items():
            if module_name in seen:
                continue
            if manifest.metadata.deletion_timestamp is None:
                await self._delete(manifest, result)
            elif await follow_release(
                self.client,
                self.catalog,
                kyma,
                manifest,
                sync_namespace=self.sync_namespace,
                restricted_modules=self.restricted_modules,
                field_manager=FIELD_MANAGER,
                descriptor=self._registry_descriptor,
                oci_registry=self.oci_registry,
            ):
                result.applied.append(manifest.name)  # upgraded while its uninstall is blocked
            previous = kyma.status.module(module_name)
            if previous is not None:
                # Gone once the Manifest controller has removed the module; until then its state.
                state = manifest_state(manifest)
                result.modules.append(
                    previous.model_copy(update={"state": State.DELETING if state is State.READY else state})
                )
        await self._sync_mandatory(kyma, mandatory_manifests, result)
        return result

    async def _sync_module(
        self,
        kyma: Kyma,
        module: Module,
        existing: tuple[Manifest, dict[str, Any]] | None,
        result: ModuleSyncResult,
    ) -> None:
        ns = kyma.namespace
        previous = kyma.status.module(module.name)
        channel = kyma.desired_channel(module)
        manifest = existing[0] if existing is not None else None
        resolution = resolve(
            kyma,
            module.name,
            channel,
            self.catalog.release_meta(ns, module.name),
            lambda name: self.catalog.template(ns, name),
            previous,
            self.restricted_modules,
            rollouts=self.rollouts,
            installed_version=manifest.spec.version if manifest is not None else None,
        )
        if isinstance(resolution, Unresolved):
            if resolution.template_not_allowed and manifest is not None:
                await self._delete(manifest, result)
            result.modules.append(_unresolved_entry(resolution, previous))
            return
        if not module.managed and manifest is None:
            result.modules.append(unmanaged_entry(resolution))
            return
        # a rollout's revert does not wait for a maintenance window: the new version already fails
        reverting = resolution.reverted_by is not None
        if module.managed and not reverting and self._held(kyma, resolution, previous, manifest, result):
            return
        try:
            descriptor = await self._registry_descriptor(resolution)
        except DescriptorUnavailable as exc:
            result.modules.append(_descriptor_entry(resolution, previous, exc))
            return
        try:
            desired = desired_manifest(
                kyma,
                resolution,
                sync_namespace=self.sync_namespace,
                unmanaged=not module.managed,
                descriptor=descriptor,
                oci_registry=self.oci_registry,
            )
        except ManifestBuildError as exc:
            result.modules.append(
                ModuleStatus(name=module.name, state=State.ERROR, channel=channel, message=str(exc))
            )
            return
        current = manifest
        if manifest is not None and manifest.is_unmanaged() and not module.managed:
            pass  # an unmanaged Manifest is never touched again (upstream)
        elif (manifest is not None and manifest.is_unmanaged()) or needs_apply(
            manifest, existing[1] if existing else None, desired
        ):
            applied = await self.client.apply(MANIFESTS, apply_body(desired), field_manager=FIELD_MANAGER)
            current = Manifest.from_object(applied)
            result.applied.append(desired.name)
            if resolution.reverted_by:
                result.reverted.append((module.name, resolution.reverted_by))
        assert current is not None
        if not module.managed:
            result.modules.append(unmanaged_entry(resolution))
        else:
            result.modules.append(entry_for(resolution, current))

    def _held(
        self,
        kyma: Kyma,
        resolution: Resolved,
        previous: ModuleStatus | None,
        manifest: Manifest | None,
        result: ModuleSyncResult,
    ) -> bool:
        """An upgrade waiting for a maintenance window: the installed version's Manifest stays as
        it is (still reconciled) and the entry says why and until when."""
        if self.maintenance is None or previous is None or manifest is None:
            return False  # nothing installed (or its Manifest gone): installing does not wait
        installed = previous
        if manifest.spec.version:
            # the live Manifest's version is what runs (the status may lag behind an upgrade)
            installed = previous.model_copy(update={"version": manifest.spec.version})
        hold = self.maintenance.hold(kyma, resolution.template, installed)
        if hold is None:
            return False
        if isinstance(hold, Waiting):
            state = manifest_state(manifest)
            entry = installed.model_copy(
                update={"state": state, "message": hold.message, "maintenance": True}
            )
            wake = hold.wake_after
            result.wake_after = wake if result.wake_after is None else min(result.wake_after, wake)
        else:
            entry = installed.model_copy(update={"state": State.ERROR, "message": hold.message})
        result.modules.append(entry)
        return True

    async def _sync_mandatory(
        self,
        kyma: Kyma,
        existing: dict[str, tuple[Manifest, dict[str, Any]]],
        result: ModuleSyncResult,
    ) -> None:
        ns = kyma.namespace
        wanted: set[str] = set()
        for meta in self.catalog.mandatory(ns):
            assert meta.spec.mandatory is not None
            module = meta.spec.module_name or meta.name
            wanted.add(module)
            version = meta.spec.mandatory.version
            current = existing.get(module)
            rollout: str | None = None
            reverted_by: str | None = None
            run = self.rollouts(module, MANDATORY_CHANNEL) if self.rollouts is not None else None
            if run is not None:
                installed = current[0].spec.version if current is not None else None
                decision = target(run, version, kyma.labels, kyma.name, installed)
                version, rollout, reverted_by = decision.version, decision.rollout, decision.reverted_by
            template = self.catalog.template(ns, template_name(module, version))
            if not isinstance(template, ModuleTemplate):
                result.mandatory[module] = State.ERROR
                continue
            resolved = Resolved(module, "", version, template, meta, rollout, reverted_by)
            try:
                desired = desired_manifest(
                    kyma,
                    resolved,
                    sync_namespace=self.sync_namespace,
                    mandatory=True,
                    descriptor=await self._registry_descriptor(resolved),
                    oci_registry=self.oci_registry,
                )
            except (ManifestBuildError, DescriptorUnavailable):
                result.mandatory[module] = State.ERROR
                continue
            if needs_apply(current[0] if current else None, current[1] if current else None, desired):
                applied = await self.client.apply(MANIFESTS, apply_body(desired), field_manager=FIELD_MANAGER)
                result.applied.append(desired.name)
                if reverted_by:
                    result.reverted.append((module, reverted_by))
                result.mandatory[module] = manifest_state(Manifest.from_object(applied))
            elif current is not None:
                result.mandatory[module] = manifest_state(current[0])
        for module, (manifest, _) in existing.items():
            if module not in wanted and manifest.metadata.deletion_timestamp is None:
                await self._delete(manifest, result)
        metas = [meta for meta in self.catalog.release_metas(ns) if isinstance(meta, ModuleReleaseMeta)]
        await release_finalizers(self.client, self.manifests, metas)  # upstream's, on deleted ones

    async def _registry_descriptor(self, resolved: Resolved) -> ComponentDescriptor | None:
        """The registry's descriptor for an upstream-form template (``spec.descriptor`` empty);
        None for a template that embeds one (``desired_manifest`` reads that)."""
        if resolved.template.spec.descriptor:
            return None
        return await self.descriptors.descriptor(resolved)

    async def _delete(self, manifest: Manifest, result: ModuleSyncResult) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(MANIFESTS, manifest.name, manifest.namespace)
            result.deleted.append(manifest.name)


def _unresolved_entry(resolution: Unresolved, previous: ModuleStatus | None) -> ModuleStatus:
    if resolution.keep_previous and previous is not None:
        return previous.model_copy(
            update={"state": resolution.state, "message": resolution.message, "maintenance": False}
        )
    return ModuleStatus(
        name=resolution.module, state=resolution.state, channel=resolution.channel, message=resolution.message
    )


def _descriptor_entry(
    resolved: Resolved, previous: ModuleStatus | None, exc: DescriptorUnavailable
) -> ModuleStatus:
    """Error entry of a module whose descriptor cannot be fetched; an installed module keeps its
    entry (its Manifest is left as it is) with state Error and the message."""
    message = (
        f"module {resolved.module!r} channel {resolved.channel!r}: ModuleTemplate "
        f"{resolved.template.name!r}: {exc}"
    )
    if previous is not None and previous.template is not None:
        return previous.model_copy(update={"state": State.ERROR, "message": message})
    return ModuleStatus(name=resolved.module, state=State.ERROR, channel=resolved.channel, message=message)
