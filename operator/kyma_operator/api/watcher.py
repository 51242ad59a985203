"""Model of the Watcher custom resource (``watchers.operator.kyma-project.io/v1beta2``).

Why: the Watcher controller turns Watchers into VirtualServices, and the per-runtime agent
configuration (webhook rules, event paths) is rendered from them; both read this model.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from kyma_operator.api import names
from kyma_operator.api.meta import Condition, KubeModel, KubeObject, LabelSelector, State
from kyma_operator.api.names import ResourceInfo


class FieldName(StrEnum):
    """Which part of a watched object triggers events."""

    SPEC = "spec"
    STATUS = "status"


class WatcherConditionType(StrEnum):
    VIRTUAL_SERVICE = "VirtualService"
    GATEWAY_SECRET = "GatewaySecret"
    """Ours: whether the gateway's TLS credential (the Secret the Gateway serves with) was usable at
    the operator's last look; False names what was wrong and whether it was repaired."""


GATEWAY_SECRET_USABLE = "the gateway Secret holds a usable credential"
GATEWAY_SECRET_REASON_USABLE = "Usable"
GATEWAY_SECRET_REASON_INVALID = "Invalid"


# Upstream's only Watcher condition reason and its two messages.
WATCHER_CONDITION_REASON = "Ready"
VIRTUAL_SERVICE_CONFIGURED = "VirtualService is configured"
VIRTUAL_SERVICE_NOT_CONFIGURED = "VirtualService is not configured"


class ServiceInfo(KubeModel):
    """The KCP service receiving the events."""

    name: str
    namespace: str
    port: int

    def host(self) -> str:
        return f"{self.name}.{self.namespace}.svc.cluster.local"


class WatchableGVR(KubeModel):
    """Group, version (may be ``*``) and plural resource name to watch."""

    group: str
    version: str
    resource: str


def default_gateway_selector() -> LabelSelector:
    """Upstream ``DefaultIstioGatewaySelector()``: Gateways labelled watcher-gateway=default."""
    return LabelSelector(match_labels={names.WATCHER_GATEWAY_LABEL: names.DEFAULT_WATCHER_GATEWAY})


class GatewayConfig(KubeModel):
    selector: LabelSelector


class WatcherSpec(KubeModel):
    service_info: ServiceInfo
    resource_to_watch: WatchableGVR
    field: FieldName
    gateway: GatewayConfig
    manager: str | None = None
    labels_to_watch: dict[str, str] = Field(default_factory=dict)


class WatcherStatus(KubeModel):
    state: State
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


class Watcher(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.WATCHER

    spec: WatcherSpec
    status: WatcherStatus | None = None

    def manager_name(self) -> str:
        """``spec.manager``, else the label ``operator.kyma-project.io/managed-by``, else ""."""
        return self.spec.manager or self.labels.get(names.MANAGED_BY_LABEL, "")

    def state(self) -> State | None:
        return self.status.state if self.status is not None else None
