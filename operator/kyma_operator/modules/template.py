"""ModuleTemplate and ModuleReleaseMeta for a component version, and a Manifest's install source.

Why: the operator resolves modules through the catalog (ModuleReleaseMeta channel -> version ->
ModuleTemplate ``<module>-<version>`` with the descriptor embedded, schema v2) and installs the
``raw-manifest`` blob that the descriptor's repository context and ``localReference`` locate. The CLI
(``kyma module template|deploy``), the test helper ``publish_module`` and the Manifest controller must
agree on these shapes, so they are produced and read here only. Output is validated through the
project's CRD models (``kyma_operator.api``).

The template carries what upstream modulectl writes (its generated template for the shared sample
is the reference, issue 24 item 5): the ``operator.kyma-project.io/module-name`` label, the
``operator.kyma-project.io/is-cluster-scoped`` annotation from the scope of the default CR's CRD in
the manifest, ``requiresDowntime``, ``info``, ``manager``, ``resources`` (``rawManifest`` = the
manifest's URL when it was given as one). The descriptor is embedded (``DescriptorForm.EMBEDDED``)
or left ``{}`` (``REGISTRY``: upstream's current form, the descriptor is read from the registry by
the release meta's ``ocmComponentName`` and the version).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.manifest import RefType
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.modules import constants as c
from kyma_operator.modules.build import ModuleConfig
from kyma_operator.modules.descriptor import ComponentDescriptor
from kyma_operator.modules.fetch import is_url

DEFAULT_NAMESPACE = "kcp-system"
RAW_MANIFEST_LINK = "rawManifest"
"""modulectl's ``resources`` entry for the manifest's URL."""


class DescriptorForm(StrEnum):
    """How ``spec.descriptor`` carries the component descriptor."""

    EMBEDDED = "embedded"
    """The whole descriptor (schema v2): read by this operator and by lifecycle-manager before
    it moved to the registry; newer lifecycle-manager ignores it and reads the registry."""
    REGISTRY = "registry"
    """``{}`` as modulectl writes it today: the descriptor is fetched from the OCI registry."""


def cluster_scoped(manifest: Iterable[Mapping[str, Any]], default_cr: Mapping[str, Any] | None) -> bool:
    """Whether the default CR's CRD in ``manifest`` is ``scope: Cluster`` (modulectl's crdparser:
    matched by group and kind; no default CR or no such CRD: namespaced)."""
    if not default_cr:
        return False
    group = str(default_cr.get("apiVersion") or "").split("/", 1)[0]
    kind = default_cr.get("kind")
    for obj in manifest:
        spec = obj.get("spec") or {}
        if (
            obj.get("kind") == "CustomResourceDefinition"
            and spec.get("group") == group
            and (spec.get("names") or {}).get("kind") == kind
        ):
            return spec.get("scope") == "Cluster"
    return False


def template_name(module_name: str, version: str) -> str:
    return f"{module_name}-{version}"


def module_template(
    config: ModuleConfig,
    descriptor: ComponentDescriptor,
    *,
    default_cr: dict[str, Any] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    is_cluster_scoped: bool = False,
    form: DescriptorForm = DescriptorForm.EMBEDDED,
) -> dict[str, Any]:
    labels = dict(config.labels)
    labels[names.MODULE_NAME_LABEL] = config.module_name
    if config.mandatory:
        labels[names.MANDATORY_MODULE_LABEL] = names.ENABLE_LABEL_VALUE  # as modulectl's generateLabels
    if config.beta:
        labels[names.BETA_LABEL] = names.ENABLE_LABEL_VALUE
    if config.internal:
        labels[names.INTERNAL_LABEL] = names.ENABLE_LABEL_VALUE
    metadata: dict[str, Any] = {
        "name": template_name(config.module_name, config.version),
        "namespace": namespace,
        "labels": dict(sorted(labels.items())),
    }
    annotations = dict(config.annotations)
    annotations[names.IS_CLUSTER_SCOPED_ANNOTATION] = (
        names.ENABLE_LABEL_VALUE if is_cluster_scoped else names.DISABLE_LABEL_VALUE
    )
    metadata["annotations"] = dict(sorted(annotations.items()))
    spec: dict[str, Any] = {"moduleName": config.module_name, "version": config.version}
    if config.mandatory:
        spec["mandatory"] = True
    spec["requiresDowntime"] = config.requires_downtime
    spec["descriptor"] = descriptor.to_v2() if form is DescriptorForm.EMBEDDED else {}
    if default_cr is not None:
        spec["data"] = default_cr
    if config.manager is not None:
        spec["manager"] = config.manager.model_dump(exclude_none=True)
    if config.repository or config.documentation or config.icons:
        spec["info"] = {
            "repository": config.repository,
            "documentation": config.documentation,
            "icons": [{"name": k, "link": v} for k, v in sorted(config.icons.items())],
        }
    if config.associated_resources:
        spec["associatedResources"] = [g.model_dump() for g in config.associated_resources]
    links = dict(config.resources)
    if config.manifest is not None and is_url(config.manifest):
        links = {RAW_MANIFEST_LINK: config.manifest, **links}  # the config's own entry wins
    if links:
        spec["resources"] = [{"name": k, "link": v} for k, v in sorted(links.items())]
    template = {
        "apiVersion": names.MODULE_TEMPLATE.api_version,
        "kind": names.MODULE_TEMPLATE.kind,
        "metadata": metadata,
        "spec": spec,
    }
    ModuleTemplate.model_validate(template)  # our CRD model must accept what we write
    return template


def module_release_meta(
    config: ModuleConfig, *, namespace: str = DEFAULT_NAMESPACE, existing: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The release meta assigning ``config.channel`` to ``config.version`` (merged into ``existing``)."""
    spec: dict[str, Any] = dict((existing or {}).get("spec") or {})
    spec["moduleName"] = config.module_name
    spec["ocmComponentName"] = config.name
    if config.mandatory:
        spec.pop("channels", None)
        spec["mandatory"] = {"version": config.version}
    else:
        spec.pop("mandatory", None)
        channels = [ch for ch in spec.get("channels") or [] if ch.get("channel") != config.channel]
        channels.append({"channel": config.channel, "version": config.version})
        spec["channels"] = sorted(channels, key=lambda ch: str(ch.get("channel")))
    if config.beta:
        spec["beta"] = True
    if config.internal:
        spec["internal"] = True
    meta = {
        "apiVersion": names.MODULE_RELEASE_META.api_version,
        "kind": names.MODULE_RELEASE_META.kind,
        "metadata": {"name": config.module_name, "namespace": namespace},
        "spec": spec,
    }
    ModuleReleaseMeta.model_validate(meta)
    return meta


@dataclass(frozen=True)
class InstallSource:
    """Where a Manifest finds a layer: ``spec.install.source`` (type ``oci-ref``)."""

    repo: str
    name: str
    ref: str
    type: str = "oci-ref"

    def to_object(self) -> dict[str, str]:
        return {"repo": self.repo, "name": self.name, "ref": self.ref, "type": self.type}

    @property
    def registry(self) -> str:
        return self.repo.split("/", 1)[0]

    @property
    def repository(self) -> str:
        """The OCI repository holding the blob (``<path>/component-descriptors/<name>``)."""
        path = self.repo.split("/", 1)[1] if "/" in self.repo else ""
        return f"{path}/{self.name}" if path else self.name


@dataclass(frozen=True)
class ModuleSources:
    """What a Manifest installs for a component version: the raw manifest (``oci-ref``) or the
    Helm chart (``helm-chart``), and for charts the optional values layer (``spec.config``)."""

    install: InstallSource
    values: InstallSource | None = None

    @property
    def layer(self) -> str:
        """``spec.install.name``: the resource installed."""
        return c.HELM_CHART if self.install.type == RefType.HELM_CHART.value else c.RAW_MANIFEST


def module_sources(descriptor: ComponentDescriptor) -> ModuleSources:
    """The install source of a module's component version: its ``raw-manifest``, else its ``helm-chart``."""
    if descriptor.resource(c.RAW_MANIFEST) is None and descriptor.resource(c.HELM_CHART) is not None:
        chart = install_source(descriptor, c.HELM_CHART)
        values = install_source(descriptor, c.HELM_VALUES) if descriptor.resource(c.HELM_VALUES) else None
        return ModuleSources(replace(chart, type=RefType.HELM_CHART.value), values)
    return ModuleSources(install_source(descriptor, c.RAW_MANIFEST))


def repository_base(context: dict[str, Any]) -> str:
    """``host[:port][/path]`` of an OCI repository context: ``baseUrl`` without scheme, then
    ``subPath`` (``ocm transfer`` writes ``{baseUrl: <host>, subPath: <path>}``; the component
    versions then live at ``<host>/<subPath>/component-descriptors/...``)."""
    base = str(context.get("baseUrl") or "").strip().rstrip("/")
    for scheme in ("https://", "http://", "oci://"):
        base = base.removeprefix(scheme)
    sub = str(context.get("subPath") or "").strip().strip("/")
    return f"{base}/{sub}" if sub else base


def oci_context(descriptor: ComponentDescriptor) -> dict[str, Any]:
    """The descriptor's effective OCI repository context (the last one; ``ocm transfer`` appends)."""
    contexts = [
        ctx
        for ctx in descriptor.component.repository_contexts
        if ctx.get("type") in (c.REPOSITORY_CONTEXT_OCI, "ociRegistry")
    ]
    if not contexts:
        raise ValueError(f"{descriptor.component.name}: descriptor has no OCI repository context")
    return contexts[-1]


def install_source(descriptor: ComponentDescriptor, resource_name: str = c.RAW_MANIFEST) -> InstallSource:
    """The ``oci-ref`` source of a local-blob resource, as lifecycle-manager maps it from a descriptor."""
    base = repository_base(oci_context(descriptor))
    resource = descriptor.resource(resource_name)
    if resource is None or resource.access is None or resource.access.type != c.ACCESS_LOCAL_BLOB:
        raise ValueError(f"{descriptor.component.name}: no local blob resource {resource_name!r}")
    ref = resource.access.field("localReference")
    if ref is None:
        raise ValueError(f"{descriptor.component.name}: resource {resource_name!r} has no localReference")
    return InstallSource(f"{base}/{c.COMPONENT_DESCRIPTORS_PREFIX}", descriptor.component.name, ref)
