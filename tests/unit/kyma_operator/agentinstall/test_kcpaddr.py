"""KCP address resolution from the Gateway (upstream ResolveKcpAddr cases)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.agentinstall.kcpaddr import GatewayAddressError, resolve_kcp_addr
from kyma_wire.names import KCP_NAMESPACE


def _gateway(*servers: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "klm-watcher", "namespace": KCP_NAMESPACE},
        "spec": {"servers": list(servers)},
    }


def _server(*hosts: str, port: int = 443) -> dict[str, Any]:
    return {"port": {"number": port, "name": "https", "protocol": "HTTPS"}, "hosts": list(hosts)}


def test_default_port_and_override() -> None:
    assert resolve_kcp_addr(_gateway(_server("listener.kcp.io"))) == "listener.kcp.io:443"
    assert (
        resolve_kcp_addr(_gateway(_server("listener.kcp.io")), port_override=9443) == "listener.kcp.io:9443"
    )


@pytest.mark.parametrize(
    ("gateway", "message"),
    [
        (_gateway(), "exactly one server, has 0"),
        (_gateway(_server("a"), _server("b")), "exactly one server, has 2"),
        (_gateway(_server("a", "b")), "exactly one host, has 2"),
        (_gateway(_server()), "exactly one host, has 0"),
        (_gateway(_server(" ")), "blank host"),
    ],
)
def test_misconfigured_gateways(gateway: dict[str, Any], message: str) -> None:
    with pytest.raises(GatewayAddressError, match=message):
        resolve_kcp_addr(gateway)


def test_override_must_be_a_port() -> None:
    with pytest.raises(GatewayAddressError, match="outside"):
        resolve_kcp_addr(_gateway(_server("h")), port_override=0)
