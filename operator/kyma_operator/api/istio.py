"""Models of the Istio Gateway and VirtualService fields lifecycle-manager reads and writes.

Why: no maintained Python package models Istio's networking API, and we only need a handful of
fields: the Watcher controller reads Gateways (hosts, selector) and writes VirtualServices (hosts,
gateways, one HTTP route); the KCP address for runtime agents comes from the Gateway's server.
Every other Istio field is kept unchanged when an object is read and written back.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Self

from pydantic import Field, model_validator

from kyma_operator.api import names
from kyma_operator.api.meta import KubeModel, KubeObject
from kyma_operator.api.names import ResourceInfo


class TLSMode(StrEnum):
    PASSTHROUGH = "PASSTHROUGH"
    SIMPLE = "SIMPLE"
    MUTUAL = "MUTUAL"
    AUTO_PASSTHROUGH = "AUTO_PASSTHROUGH"
    ISTIO_MUTUAL = "ISTIO_MUTUAL"
    OPTIONAL_MUTUAL = "OPTIONAL_MUTUAL"


class TLSProtocol(StrEnum):
    TLS_AUTO = "TLS_AUTO"
    TLSV1_0 = "TLSV1_0"
    TLSV1_1 = "TLSV1_1"
    TLSV1_2 = "TLSV1_2"
    TLSV1_3 = "TLSV1_3"


class Port(KubeModel):
    number: int
    name: str
    protocol: str
    target_port: int | None = None


class ServerTLSSettings(KubeModel):
    mode: TLSMode | None = None
    credential_name: str | None = None
    min_protocol_version: TLSProtocol | None = None
    max_protocol_version: TLSProtocol | None = None
    https_redirect: bool | None = None


class Server(KubeModel):
    port: Port
    hosts: list[str]
    name: str | None = None
    tls: ServerTLSSettings | None = None


class GatewaySpec(KubeModel):
    selector: dict[str, str] = Field(default_factory=dict)
    servers: list[Server] = Field(default_factory=list)


class Gateway(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.GATEWAY

    spec: GatewaySpec = Field(default_factory=GatewaySpec)

    def hosts(self) -> list[str]:
        """Every host of every server, in order."""
        return [host for server in self.spec.servers for host in server.hosts]

    def reference(self) -> str:
        """``<namespace>/<name>``, as listed in a VirtualService's ``spec.gateways``."""
        return f"{self.namespace}/{self.name}"


class StringMatch(KubeModel):
    """Exactly one of ``exact``, ``prefix`` or ``regex``."""

    exact: str | None = None
    prefix: str | None = None
    regex: str | None = None

    @model_validator(mode="after")
    def _at_most_one(self) -> Self:
        if sum(value is not None for value in (self.exact, self.prefix, self.regex)) > 1:
            raise ValueError("a string match sets at most one of exact, prefix and regex")
        return self


class HTTPMatchRequest(KubeModel):
    name: str | None = None
    uri: StringMatch | None = None


class PortSelector(KubeModel):
    number: int


class Destination(KubeModel):
    host: str
    subset: str | None = None
    port: PortSelector | None = None


class HTTPRouteDestination(KubeModel):
    destination: Destination
    weight: int | None = None


class HTTPRoute(KubeModel):
    name: str | None = None
    match: list[HTTPMatchRequest] = Field(default_factory=list)
    route: list[HTTPRouteDestination] = Field(default_factory=list)


class VirtualServiceSpec(KubeModel):
    hosts: list[str] = Field(default_factory=list)
    gateways: list[str] = Field(default_factory=list)
    http: list[HTTPRoute] = Field(default_factory=list)


class VirtualService(KubeObject):
    RESOURCE: ClassVar[ResourceInfo] = names.VIRTUAL_SERVICE

    spec: VirtualServiceSpec = Field(default_factory=VirtualServiceSpec)
