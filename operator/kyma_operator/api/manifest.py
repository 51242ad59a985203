"""Model of the Manifest custom resource (``manifests.operator.kyma-project.io/v1beta2``).

Why: the Kyma controller writes one Manifest per module and the Manifest controller installs it;
both need the same typed view, with the upstream field names and status shape (``shared.Status``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field

from kyma_operator.api import names
from kyma_operator.api.kyma import CustomResourcePolicy
from kyma_operator.api.meta import Condition, KubeModel, KubeObject, LabelSelector, LastOperation, State
from kyma_operator.api.moduletemplate import Manager
from kyma_operator.api.names import ResourceInfo


class ManifestConditionType(StrEnum):
    RESOURCES = "Resources"
    INSTALLATION = "Installation"
    MODULE_CR = "ModuleCR"


class ManifestConditionReason(StrEnum):
    RESOURCES_AVAILABLE = "ResourcesAvailable"
    READY = "Ready"
    MODULE_CR_CREATED = "ModuleCRCreated"


class RefType(StrEnum):
    OCI_REF = "oci-ref"
    OCI_DIR = "oci-dir"
    HELM_CHART = "helm-chart"


# The only install layer lifecycle-manager renders.
RAW_MANIFEST_LAYER = "raw-manifest"


class ImageSpec(KubeModel):
    """An install source (``spec.install.source``) or the values layer (``spec.config``).

    ``oci-ref`` and ``oci-dir``: a layer of an OCM component version, ``repo`` (the registry,
    ``host[:port][/subpath]``, as upstream writes it; older Manifests end in
    ``/component-descriptors``), component ``name`` and layer digest ``ref``. ``oci-dir``: the layer
    is a tar holding the raw manifest (upstream: local blob media type ``application/x-tar``);
    ``oci-ref``: the layer is the YAML.

    ``helm-chart`` (upstream's historical ``HelmChartSpec`` names ``url``, ``chartName``, ``type``):
    the chart ``chartName`` at ``version`` from ``url``, an OCI registry (``oci://host/path``) or a
    chart repository (``https://...``, its ``index.yaml``); ``ref`` optionally pins the chart
    archive's digest. Without ``url``, the chart is the local blob ``ref`` of the OCM component
    (``repo``, ``name``) like an ``oci-ref`` layer. ``values`` and ``set`` (Helm ``--set`` syntax)
    override the chart's defaults; ``releaseName`` (default: ``chartName``) and ``namespace``
    (default: the operator's sync namespace) are the release Helm renders for.
    """

    repo: str | None = None
    name: str | None = None
    ref: str | None = None
    type: str | None = None
    cred_secret_selector: LabelSelector | None = None
    url: str | None = None
    chart_name: str | None = None
    version: str | None = None
    release_name: str | None = None
    namespace: str | None = None
    values: dict[str, Any] | None = None
    set: dict[str, str] | None = None

    def is_helm_chart(self) -> bool:
        return self.type == RefType.HELM_CHART.value


class InstallInfo(KubeModel):
    name: str
    source: ImageSpec


class ManifestSpec(KubeModel):
    remote: bool
    install: InstallInfo
    custom_resource_policy: CustomResourcePolicy = CustomResourcePolicy.CREATE_AND_DELETE
    version: str | None = None
    config: ImageSpec | None = None
    # The module's default CR, free-form.
    resource: dict[str, Any] | None = None
    localized_images: list[str] | None = None
    """Image references valid where the module is installed (upstream: the descriptor's
    ``ociArtifact`` resources); each replaces the image of the same name and tag (see
    ``controllers.manifest.imagelocalization``). Omitted when empty, as upstream."""
    manager: Manager | None = None


class SyncedResource(KubeModel):
    """One object installed by a Manifest (entry of ``status.synced``)."""

    group: str
    version: str
    kind: str
    name: str
    namespace: str

    def id(self) -> str:
        """Upstream's identity of a synced object: ``ns/name/group/version/kind``."""
        return f"{self.namespace}/{self.name}/{self.group}/{self.version}/{self.kind}"


class ManifestStatus(KubeModel):
    state: State
    conditions: list[Condition] = Field(default_factory=list)
    synced: list[SyncedResource] = Field(default_factory=list)
    last_operation: LastOperation | None = None
    observed_generation: int | None = None
    """Ours: the ``metadata.generation`` this status was determined from (upstream has none)."""
    synced_ref: str | None = None
    """Ours: the reference (OCI digest) of the rendering whose objects ``synced`` lists; written in
    the same status write as that list, so the two never disagree (upstream has none)."""


class Manifest(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.MANIFEST

    spec: ManifestSpec
    status: ManifestStatus | None = None

    def kyma_name(self) -> str | None:
        return self.labels.get(names.KYMA_NAME_LABEL)

    def module_name(self) -> str | None:
        return self.labels.get(names.MODULE_NAME_LABEL)

    def channel(self) -> str | None:
        return self.labels.get(names.CHANNEL_LABEL)

    def is_unmanaged(self) -> bool:
        return self.annotations.get(names.UNMANAGED_ANNOTATION) == names.ENABLE_LABEL_VALUE

    def is_mandatory(self) -> bool:
        return self.labels.get(names.MANDATORY_MODULE_LABEL) == names.ENABLE_LABEL_VALUE

    def skip_reconciliation(self) -> bool:
        return self.labels.get(names.SKIP_RECONCILIATION_LABEL) == names.ENABLE_LABEL_VALUE

    def state(self) -> State | None:
        return self.status.state if self.status is not None else None

    def status_is_current(self) -> bool:
        """False when the status was written for an older spec (ours: ``observedGeneration``); a
        status without it (upstream's) counts as current."""
        if self.status is None or self.status.observed_generation is None:
            return True
        generation = self.metadata.generation
        return generation is None or self.status.observed_generation >= generation
