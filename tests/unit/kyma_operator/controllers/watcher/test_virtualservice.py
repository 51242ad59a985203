"""VirtualService rendering, Gateway selection (matchLabels + matchExpressions) and the write decision."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kyma_operator.api.istio import Gateway
from kyma_operator.api.meta import LabelSelector
from kyma_operator.api.watcher import Watcher
from kyma_operator.controllers.watcher.virtualservice import (
    RenderError,
    merged_for_update,
    needs_write,
    render,
    route_prefix,
    select_gateways,
)
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME


def _watcher(selector: dict[str, Any] | None = None, **spec: Any) -> Watcher:
    body: dict[str, Any] = {
        "metadata": {"name": "klm-watcher", "namespace": KCP_NAMESPACE, "uid": "uid-1"},
        "spec": {
            "manager": OPERATOR_NAME,
            "resourceToWatch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
            "field": "spec",
            "serviceInfo": {"name": "events", "namespace": KCP_NAMESPACE, "port": 8082},
            "gateway": {"selector": selector or {"matchLabels": {"gw": "default"}}},
            **spec,
        },
    }
    return Watcher.from_object(body)


def _gateway(name: str, labels: dict[str, str], hosts: list[str]) -> Gateway:
    return Gateway.from_object(
        {
            "metadata": {"name": name, "namespace": KCP_NAMESPACE, "labels": labels},
            "spec": {
                "servers": [{"port": {"number": 443, "name": "https", "protocol": "HTTPS"}, "hosts": hosts}]
            },
        }
    )


def test_render_upstream_shape_with_prefix_for_events_and_heartbeats() -> None:
    vs = render(
        _watcher(),
        [_gateway("b", {"gw": "default"}, ["b.io"]), _gateway("a", {"gw": "default"}, ["a.io", "b.io"])],
        namespace=KCP_NAMESPACE,
    )
    body = vs.to_object()
    assert body["metadata"]["name"] == "klm-watcher" and body["metadata"]["namespace"] == KCP_NAMESPACE
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Watcher",
            "name": "klm-watcher",
            "uid": "uid-1",
        }
    ]
    assert body["spec"]["gateways"] == [f"{KCP_NAMESPACE}/a", f"{KCP_NAMESPACE}/b"]
    assert body["spec"]["hosts"] == ["a.io", "b.io"]
    assert body["spec"]["http"] == [
        {
            "name": f"{KCP_NAMESPACE}/klm-watcher",
            "match": [{"uri": {"prefix": f"/v2/{OPERATOR_NAME}/"}}],
            "route": [
                {
                    "destination": {
                        "host": f"events.{KCP_NAMESPACE}.svc.cluster.local",
                        "port": {"number": 8082},
                    }
                }
            ],
        }
    ]
    assert route_prefix("m") == "/v2/m/"
    assert "/v2/m/event".startswith(route_prefix("m")) and "/v2/m/heartbeat".startswith(route_prefix("m"))


def test_selector_with_match_expressions() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"tier": "edge"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "stage"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    gateways = [
        _gateway("prod", {"tier": "edge", "env": "prod"}, ["p"]),
        _gateway("dev", {"tier": "edge", "env": "dev"}, ["d"]),
        _gateway("legacy", {"tier": "edge", "env": "prod", "legacy": "yes"}, ["l"]),
        _gateway("inner", {"env": "prod"}, ["i"]),
    ]
    assert [g.name for g in select_gateways(gateways, selector)] == ["prod"]
    assert [g.name for g in select_gateways(gateways, LabelSelector())] == ["dev", "inner", "legacy", "prod"]


def test_gateway_problems_are_named() -> None:
    with pytest.raises(RenderError) as none:
        render(_watcher(), [_gateway("x", {"gw": "other"}, ["h"])], namespace=KCP_NAMESPACE)
    assert none.value.problem.reason == "GatewayNotFound"
    assert "gw=default" in str(none.value) and KCP_NAMESPACE in str(none.value)
    with pytest.raises(RenderError) as hostless:
        render(_watcher(), [_gateway("x", {"gw": "default"}, [])], namespace=KCP_NAMESPACE)
    assert hostless.value.problem.reason == "GatewayHostMissing"
    assert f"{KCP_NAMESPACE}/x" in str(hostless.value)


def test_write_only_when_something_we_own_differs() -> None:
    desired = render(_watcher(), [_gateway("a", {"gw": "default"}, ["a.io"])], namespace=KCP_NAMESPACE)
    current = copy.deepcopy(desired.to_object())
    current["metadata"].update(resourceVersion="7", uid="vs-uid", annotations={"someone": "else"})
    current["metadata"]["labels"]["extra"] = "kept"
    assert needs_write(None, desired)
    assert not needs_write(current, desired)

    drifted = copy.deepcopy(current)
    drifted["spec"]["hosts"] = ["evil.io"]
    assert needs_write(drifted, desired)
    merged = merged_for_update(drifted, desired)
    assert merged["spec"] == desired.to_object()["spec"]
    assert merged["metadata"]["resourceVersion"] == "7"
    assert merged["metadata"]["annotations"] == {"someone": "else"}
    assert merged["metadata"]["labels"]["extra"] == "kept"

    orphan = copy.deepcopy(current)
    orphan["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": "y", "uid": "other"}]
    assert needs_write(orphan, desired)
    refs = merged_for_update(orphan, desired)["metadata"]["ownerReferences"]
    assert [r["uid"] for r in refs] == ["other", "uid-1"]
