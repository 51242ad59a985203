"""The ``host:port`` agents send to, from the KCP Gateway (upstream ``gateway.Service.ResolveKcpAddr``).

Upstream reads it once at start-up from Gateway ``kcp-system/klm-watcher`` and refuses to start if
the Gateway is not exactly one server with exactly one non-blank host; the port is the server's
unless overridden (``--listener-port-overwrite``, e.g. a local k3d port mapping). Same rules here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kyma_operator.api.istio import Gateway


class GatewayAddressError(ValueError):
    """The Gateway cannot tell agents where to send; the message says what is wrong with it."""


def resolve_kcp_addr(gateway: Gateway | Mapping[str, Any], *, port_override: int | None = None) -> str:
    gw = gateway if isinstance(gateway, Gateway) else Gateway.from_object(gateway)
    where = f"Gateway {gw.namespace}/{gw.name}"
    if len(gw.spec.servers) != 1:
        raise GatewayAddressError(f"{where} must have exactly one server, has {len(gw.spec.servers)}")
    server = gw.spec.servers[0]
    if len(server.hosts) != 1:
        raise GatewayAddressError(f"{where} must have exactly one host, has {len(server.hosts)}")
    host = server.hosts[0].strip()
    if not host:
        raise GatewayAddressError(f"{where} has a blank host")
    port = port_override if port_override is not None else server.port.number
    if not 1 <= port <= 65535:
        raise GatewayAddressError(f"port {port} is outside 1-65535")
    return f"{host}:{port}"
