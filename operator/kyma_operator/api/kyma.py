"""Model of the Kyma custom resource (``kymas.operator.kyma-project.io/v1beta2``).

Why: the Kyma controller, the listener's runtime-id lookup and the runtime sync all read and write
Kymas; this is the one typed view of them, with the upstream field names.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from kyma_operator.api import names
from kyma_operator.api.meta import Condition, KubeModel, KubeObject, LastOperation, State
from kyma_operator.api.names import ResourceInfo


class CustomResourcePolicy(StrEnum):
    """Whether the module's default CR is created on install and deleted on removal."""

    CREATE_AND_DELETE = "CreateAndDelete"
    IGNORE = "Ignore"


class KymaConditionType(StrEnum):
    CRDS_SYNC = "CRDsSync"
    MODULES = "Modules"
    MODULE_CATALOG = "ModuleCatalog"
    SKR_WEBHOOK = "SKRWebhook"
    SKR_IMAGE_PULL_SECRET_SYNC = "SKRImagePullSecretSync"


# Every Kyma condition carries this reason; the status says whether it holds.
KYMA_CONDITION_REASON = "Ready"


class Module(KubeModel):
    """One entry of ``spec.modules``."""

    name: str
    channel: str | None = None
    controller: str | None = None
    remote_module_template_ref: str | None = None
    custom_resource_policy: CustomResourcePolicy = CustomResourcePolicy.CREATE_AND_DELETE
    managed: bool = True


class KymaSpec(KubeModel):
    channel: str
    skip_maintenance_windows: bool = False
    modules: list[Module] = Field(default_factory=list)

    def module(self, name: str) -> Module | None:
        return next((m for m in self.modules if m.name == name), None)


class PartialMeta(KubeModel):
    name: str = ""
    namespace: str = ""
    generation: int | None = None


class TrackingObject(KubeModel):
    """apiVersion, kind and name/namespace/generation of an object a module status refers to."""

    api_version: str = ""
    kind: str = ""
    metadata: PartialMeta = Field(default_factory=PartialMeta)


class ModuleStatus(KubeModel):
    """One entry of ``status.modules``."""

    name: str
    state: State
    fqdn: str | None = None
    ocm_component_name: str | None = None
    channel: str | None = None
    version: str | None = None
    message: str | None = None
    manifest: TrackingObject | None = None
    resource: TrackingObject | None = None
    template: TrackingObject | None = None
    maintenance: bool = False


class KymaStatus(KubeModel):
    state: State | None = None
    last_operation: LastOperation | None = None
    active_channel: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    modules: list[ModuleStatus] = Field(default_factory=list)

    def module(self, name: str) -> ModuleStatus | None:
        return next((m for m in self.modules if m.name == name), None)


class Kyma(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.KYMA

    spec: KymaSpec
    status: KymaStatus = Field(default_factory=KymaStatus)

    def runtime_id(self) -> str:
        """The runtime this Kyma stands for (label ``kyma-project.io/runtime-id``); "" if unset."""
        return self.labels.get(names.RUNTIME_ID_LABEL, "")

    def skip_reconciliation(self) -> bool:
        return _enabled(self.labels.get(names.SKIP_RECONCILIATION_LABEL))

    def is_internal(self) -> bool:
        return _enabled(self.labels.get(names.INTERNAL_LABEL))

    def is_beta(self) -> bool:
        return _enabled(self.labels.get(names.BETA_LABEL))

    def is_managed_by_lifecycle_manager(self) -> bool:
        return self.labels.get(names.MANAGED_BY_LABEL) == names.OPERATOR_NAME

    def desired_channel(self, module: Module) -> str:
        """Module channel, else Kyma channel, else the default channel ``regular``."""
        return module.channel or self.spec.channel or names.DEFAULT_CHANNEL


def _enabled(value: str | None) -> bool:
    return value is not None and value.lower() == names.ENABLE_LABEL_VALUE
