"""Model of the ModuleReleaseMeta custom resource (``modulereleasemetas.operator.kyma-project.io``).

Why: module resolution starts here (channel -> version, or the mandatory version), and the catalog
sync filters on it.
"""

from __future__ import annotations

from typing import ClassVar, Self

from pydantic import Field, model_validator

from kyma_operator.api import names
from kyma_operator.api.meta import KubeModel, KubeObject, LabelSelector
from kyma_operator.api.names import ResourceInfo


class ChannelVersionAssignment(KubeModel):
    channel: str
    version: str


class Mandatory(KubeModel):
    version: str


class ModuleReleaseMetaSpec(KubeModel):
    module_name: str
    ocm_component_name: str | None = None
    channels: list[ChannelVersionAssignment] = Field(default_factory=list)
    mandatory: Mandatory | None = None
    beta: bool = False
    internal: bool = False
    kyma_selector: LabelSelector | None = None

    @model_validator(mode="after")
    def _channels_or_mandatory(self) -> Self:
        # Same rule as the CRD's CEL validation (presence, like CEL's has()); checked here too for
        # objects built in code.
        has_channels = "channels" in self.model_fields_set or bool(self.channels)
        if has_channels == (self.mandatory is not None):
            raise ValueError("exactly one of 'mandatory' or 'channels' must be specified")
        return self


class ModuleReleaseMeta(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.MODULE_RELEASE_META

    spec: ModuleReleaseMetaSpec

    def version_for(self, channel: str) -> str | None:
        """The version assigned to ``channel``, or None."""
        return next((a.version for a in self.spec.channels if a.channel == channel), None)

    def is_mandatory(self) -> bool:
        return self.spec.mandatory is not None
