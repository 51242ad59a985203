"""Model of the ModuleTemplate custom resource (``moduletemplates.operator.kyma-project.io/v1beta2``).

Why: module resolution reads templates (version, default CR, manager, visibility labels) and the
catalog sync copies them into runtimes; the descriptor and default CR stay free-form.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from kyma_operator.api import names
from kyma_operator.api.meta import KubeModel, KubeObject, State
from kyma_operator.api.names import ResourceInfo


class Manager(KubeModel):
    """The module resource (usually its manager Deployment) that indicates installation readiness."""

    group: str
    version: str
    kind: str
    name: str
    namespace: str | None = None


class GroupVersionKind(KubeModel):
    group: str
    version: str
    kind: str


class ModuleResource(KubeModel):
    """A fetchable resource of the module, e.g. its raw manifest."""

    name: str
    link: str


class ModuleIcon(KubeModel):
    name: str
    link: str


class ModuleInfo(KubeModel):
    repository: str
    documentation: str
    icons: list[ModuleIcon] = Field(default_factory=list)


class CustomStateCheck(KubeModel):
    """Deprecated and unused; kept so templates that carry it parse."""

    json_path: str
    value: str
    mapped_state: State


class ModuleTemplateSpec(KubeModel):
    descriptor: dict[str, Any] = Field(default_factory=dict)
    channel: str | None = None
    version: str | None = None
    module_name: str | None = None
    mandatory: bool = False
    data: dict[str, Any] | None = None
    custom_state_check: list[CustomStateCheck] = Field(default_factory=list)
    resources: list[ModuleResource] = Field(default_factory=list)
    info: ModuleInfo | None = None
    associated_resources: list[GroupVersionKind] = Field(default_factory=list)
    manager: Manager | None = None
    requires_downtime: bool = False


class ModuleTemplate(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.MODULE_TEMPLATE

    spec: ModuleTemplateSpec

    def is_internal(self) -> bool:
        return self.labels.get(names.INTERNAL_LABEL, "").lower() == names.ENABLE_LABEL_VALUE

    def is_beta(self) -> bool:
        return self.labels.get(names.BETA_LABEL, "").lower() == names.ENABLE_LABEL_VALUE

    def sync_disabled(self) -> bool:
        return self.labels.get(names.SYNC_LABEL, "").lower() == names.DISABLE_LABEL_VALUE

    def sync_enabled(self, *, beta: bool, internal: bool) -> bool:
        """Whether the template may be synced to a runtime whose Kyma is (or is not) beta/internal."""
        if self.sync_disabled():
            return False
        if self.is_beta() and not beta:
            return False
        return not (self.is_internal() and not internal)

    def ocm_component_name(self) -> str | None:
        """``spec.descriptor.component.name`` if present."""
        component = self.spec.descriptor.get("component")
        if isinstance(component, dict):
            name = component.get("name")
            if isinstance(name, str):
                return name
        return None
