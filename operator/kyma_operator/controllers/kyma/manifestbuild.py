"""The Manifest the Kyma controller wants for one resolved module.

Why this exists: the module half of the Kyma reconcile writes one Manifest per (Kyma, module) with
exactly upstream's name, labels, annotations, controller owner reference and spec (install source
``oci-dir``/``oci-ref`` from the descriptor's ``raw-manifest`` resource with ``repo`` the registry,
``localizedImages`` from its ``ociArtifact`` resources, the template's default CR named and
namespaced as upstream defaults it), so that taking over Manifests lifecycle-manager wrote changes
nothing (``pkg/module/common`` ``ApplyDefaultMetaToManifest``,
``internal/service/manifest/parser/template_to_module.go``). Building it is pure so it is
unit-tested apart from the apply; the descriptor access goes through the modules library
(``layers``, ``module_sources``) only.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.manifest import ImageSpec, InstallInfo, Manifest, ManifestSpec, RefType
from kyma_operator.api.meta import ObjectMeta, OwnerReference
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.moduleresolution import Resolved, manifest_name
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.layers import localized_images, raw_manifest_source
from kyma_operator.modules.template import ModuleSources, module_sources
from kyma_operator.runtime.shardmap import SHARD_LABEL

# Upstream's --sync-namespace default: where a module's default CR lives on the runtime.
DEFAULT_SYNC_NAMESPACE = "kyma-system"


class ManifestBuildError(ValueError):
    """The template cannot become a Manifest (message names module, template and what is wrong)."""


def kyma_owner_reference(kyma: Kyma) -> OwnerReference:
    """Controller owner reference to ``kyma`` (Manifests are garbage-collected with their Kyma)."""
    if not kyma.metadata.uid:
        raise ValueError(f"Kyma {kyma.namespace}/{kyma.name} has no uid (not read from the API server?)")
    return OwnerReference(
        api_version=names.KYMA.api_version,
        kind=names.KYMA.kind,
        name=kyma.name,
        uid=kyma.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def is_cluster_scoped(template: ModuleTemplate) -> bool:
    """The template's default CR is cluster-scoped (annotation ``is-cluster-scoped=true``)."""
    return (
        template.annotations.get(names.IS_CLUSTER_SCOPED_ANNOTATION, "").lower() == names.ENABLE_LABEL_VALUE
    )


def desired_manifest(
    kyma: Kyma,
    resolved: Resolved,
    *,
    sync_namespace: str = DEFAULT_SYNC_NAMESPACE,
    mandatory: bool = False,
    unmanaged: bool = False,
    descriptor: ComponentDescriptor | None = None,
    oci_registry: str | None = None,
) -> Manifest:
    """The Manifest for ``resolved`` (raises ManifestBuildError for a template that cannot install).

    ``descriptor``: the component descriptor fetched from the registry for an upstream-form template
    (``spec.descriptor`` empty); None: the template's embedded one.

    ``mandatory``: a mandatory module (label ``mandatory-module=true``, no channel label);
    ``unmanaged``: the Kyma lists the module with ``managed: false`` (annotation ``is-unmanaged``);
    ``oci_registry``: the registry (``host[/subpath]``) descriptors are read from, upstream's
    ``install.source.repo`` (``None``: the descriptor's repository context).
    """
    template = resolved.template
    where = f"module {resolved.module!r} channel {resolved.channel!r}: ModuleTemplate {template.name!r}"
    if template.spec.data is not None and not isinstance(template.spec.data, dict):
        raise ManifestBuildError(f"{where}: spec.data (the default CR) must be an object")
    try:
        parts = INSTALL_PARTS.of(template, descriptor, oci_registry)
    except ValueError as exc:
        raise ManifestBuildError(f"{where}: {exc}") from exc
    sources, install, images = parts.sources, parts.install.model_copy(), list(parts.images)
    component = resolved.ocm_component_name
    name = manifest_name(kyma.name, component, resolved.module)
    labels = {
        names.KYMA_NAME_LABEL: kyma.name,
        names.MODULE_NAME_LABEL: resolved.module,
        names.MANAGED_BY_LABEL: names.OPERATOR_NAME,
    }
    shard = kyma.labels.get(SHARD_LABEL)
    if shard:  # its Kyma's shard (sharding on): informers can filter Manifests by shard too
        labels[SHARD_LABEL] = shard
    if mandatory:
        labels[names.MANDATORY_MODULE_LABEL] = names.ENABLE_LABEL_VALUE
    else:
        labels[names.CHANNEL_LABEL] = resolved.channel
    if template.labels:  # upstream copies it whenever the template has labels, "" if it has not this one
        labels[names.CONTROLLER_NAME_LABEL] = template.labels.get(names.CONTROLLER_NAME_LABEL, "")
    if resolved.rollout:  # ours: routes its status events to the rollout (docs/rollouts.md §5)
        labels[names.ROLLOUT_LABEL] = resolved.rollout
    annotations = {
        names.OCM_COMPONENT_NAME_ANNOTATION: component,
        names.FQDN_ANNOTATION: component,
    }
    if resolved.reverted_by:  # ours: the recorded downgrade (docs/rollouts.md §8.5)
        annotations[names.REVERTED_BY_ANNOTATION] = resolved.reverted_by
    if unmanaged:
        annotations[names.UNMANAGED_ANNOTATION] = names.ENABLE_LABEL_VALUE
    module_spec = next((m for m in kyma.spec.modules if m.name == resolved.module), None)
    resource: dict[str, Any] | None = None
    if template.spec.data:
        resource = copy.deepcopy(template.spec.data)
        metadata = resource.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise ManifestBuildError(f"{where}: spec.data.metadata must be an object")
        # upstream names and namespaces it when it does not (a cluster-scoped CR too: the Manifest
        # controller drops the namespace of a cluster-scoped kind when it applies the CR)
        if not metadata.get("name"):
            metadata["name"] = name
        if not metadata.get("namespace"):
            metadata["namespace"] = sync_namespace
    spec = ManifestSpec(
        remote=False,  # as upstream; where to install follows the Kyma (Manifest controller)
        install=InstallInfo(name=sources.layer, source=install),
        config=(
            ImageSpec(
                repo=sources.values.repo,
                name=sources.values.name,
                ref=sources.values.ref,
                type=sources.values.type,
            )
            if sources.values is not None
            else None
        ),
        version=resolved.version,
        resource=resource,
        manager=template.spec.manager,
        localized_images=images or None,
    )
    if module_spec is not None:
        spec.custom_resource_policy = module_spec.custom_resource_policy
    return Manifest(
        api_version=names.MANIFEST.api_version,
        kind=names.MANIFEST.kind,
        metadata=ObjectMeta(
            name=name,
            namespace=kyma.namespace,
            labels=labels,
            annotations=annotations,
            owner_references=[kyma_owner_reference(kyma)],
        ),
        spec=spec,
    )


@dataclass(frozen=True)
class InstallParts:
    """What a Manifest installs, as read from its template's component descriptor (the same for
    every Kyma: callers copy ``install`` before handing it out)."""

    sources: ModuleSources
    install: ImageSpec
    images: tuple[str, ...]

    @classmethod
    def read(cls, descriptor: ComponentDescriptor, oci_registry: str | None) -> InstallParts:
        sources = module_sources(descriptor)
        chart = sources.install.type == RefType.HELM_CHART.value
        install = _helm_source(sources) if chart else raw_manifest_source(descriptor, oci_registry)
        return cls(sources, install, tuple(localized_images(descriptor)))


class InstallPartsMemo:
    """:class:`InstallParts` of each catalog template version, read once instead of per Kyma.

    Why: every Kyma reconcile builds the desired Manifest of each of its modules, and all Kymas
    share a handful of templates; parsing the embedded descriptor and reading its sources was 44 %
    of ``desired_manifest`` (cProfile, 3,000 calls); with the memo, one replica's full resync of
    5,000 Kymas x 5 modules took 13.0-13.7 s of CPU instead of 18.6 s (``benchmarks/results/scale.md``,
    "the install-parts memo"). The key is the template's uid and resourceVersion
    (an edited template is read anew) and the registry; a descriptor fetched from the registry
    must be the very object read last time (the descriptor cache hands out the same one until it
    is fetched again). A template without uid or resourceVersion (not from the API server) is read
    every time, as are descriptors that fail (their error is raised each time). Bounded: the least
    recently used entries go first. ``tests/unit/.../test_manifestbuild.py`` holds it to the plain
    read."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.reads = 0
        self._entries: OrderedDict[
            tuple[str, str, str | None], tuple[ComponentDescriptor | None, InstallParts]
        ] = OrderedDict()

    def of(
        self, template: ModuleTemplate, descriptor: ComponentDescriptor | None, oci_registry: str | None
    ) -> InstallParts:
        """``descriptor``: fetched from the registry; None: the template's embedded one."""
        meta = template.metadata
        key = (meta.uid, meta.resource_version, oci_registry) if meta.uid and meta.resource_version else None
        if key is not None:
            found = self._entries.get(key)
            if found is not None and found[0] is descriptor:
                self._entries.move_to_end(key)
                return found[1]
        self.reads += 1
        parts = InstallParts.read(
            descriptor if descriptor is not None else ComponentDescriptor.parse(template.spec.descriptor),
            oci_registry,
        )
        if key is not None:
            self._entries[key] = (descriptor, parts)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return parts


INSTALL_PARTS = InstallPartsMemo()
"""The process's memo (templates of every namespace; keys carry the uid)."""


def _helm_source(sources: ModuleSources) -> ImageSpec:
    """Our Helm chart modules (no upstream counterpart): the chart's local blob, older spelling."""
    return ImageSpec(
        repo=sources.install.repo,
        name=sources.install.name,
        ref=sources.install.ref,
        type=sources.install.type,
    )
