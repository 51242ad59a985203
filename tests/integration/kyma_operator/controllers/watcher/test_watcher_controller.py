"""The Watcher controller against a real KCP API server with our Watcher and Istio CRDs.

Each test runs its own controller scoped to a fresh namespace (standing in for kcp-system).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kyma_operator.api import names
from kyma_operator.api.resources import WATCHERS
from kyma_operator.controllers.watcher.reconciler import WatcherControllerConfig
from kyma_operator.controllers.watcher.setup import WatcherController, build_watcher_controller
from kyma_operator.runtime.errors import Invalid, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CORE_EVENTS, Resource
from kyma_wire.names import KCP_NAMESPACE, OPERATOR_NAME, WATCHED_BY_LABEL
from tests.polling import eventually

GATEWAYS = Resource("networking.istio.io", "v1beta1", "gateways", "Gateway")
VIRTUAL_SERVICES = Resource("networking.istio.io", "v1beta1", "virtualservices", "VirtualService")


def gateway(name: str, namespace: str, hosts: list[str], *, default: bool = True) -> dict[str, Any]:
    labels = {names.WATCHER_GATEWAY_LABEL: "default"} if default else {"purpose": "other"}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"istio": "ingressgateway"},
            "servers": [
                {
                    "port": {"number": 443, "name": "https", "protocol": "HTTPS"},
                    "hosts": hosts,
                    "tls": {"mode": "MUTUAL", "credentialName": "klm-istio-gateway"},
                }
            ],
        },
    }


def watcher(name: str, namespace: str, **spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "manager": OPERATOR_NAME,
        "labelsToWatch": {WATCHED_BY_LABEL: "kyma"},
        "resourceToWatch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
        "field": "spec",
        "serviceInfo": {"name": "klm-controller-manager-events", "namespace": namespace, "port": 8082},
        "gateway": {"selector": {"matchLabels": {names.WATCHER_GATEWAY_LABEL: "default"}}},
    }
    spec.update(spec_overrides)
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


@pytest.fixture
async def controller(kcp_client: KubeClient, kcp_namespace: str) -> AsyncIterator[WatcherController]:
    built = build_watcher_controller(kcp_client, config=WatcherControllerConfig(namespace=kcp_namespace))
    task = asyncio.create_task(built.run())
    try:
        for informer in built.informers:
            assert await informer.wait_synced(10.0)
        yield built
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _get(client: KubeClient, res: Resource, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return await client.get(res, name, namespace)
    except NotFound:
        return None


def _condition(obj: dict[str, Any] | None) -> dict[str, Any]:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "VirtualService"), {})


async def _wait_state(client: KubeClient, name: str, namespace: str, state: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = await _get(client, WATCHERS, name, namespace)
        return obj if obj and (obj.get("status") or {}).get("state") == state else None

    return await eventually(probe, what=f"Watcher {name} in state {state}")


async def test_watcher_becomes_ready_with_its_virtual_service(
    kcp_client: KubeClient, kcp_namespace: str, controller: WatcherController
) -> None:
    ns = kcp_namespace
    await kcp_client.create(GATEWAYS, gateway("gw-b", ns, ["b.example.com"]))
    await kcp_client.create(GATEWAYS, gateway("gw-a", ns, ["a.example.com", "a2.example.com"]))
    await kcp_client.create(GATEWAYS, gateway("unrelated", ns, ["x.example.com"], default=False))
    created = await kcp_client.create(WATCHERS, watcher("klm-watcher", ns))

    ready = await _wait_state(kcp_client, "klm-watcher", ns, "Ready")
    assert names.WATCHER_FINALIZER in ready["metadata"]["finalizers"]
    condition = _condition(ready)
    assert condition["status"] == "True"
    assert condition["reason"] == "Ready"
    assert condition["message"] == "VirtualService is configured"
    assert ready["status"]["observedGeneration"] == ready["metadata"]["generation"]

    vs = await kcp_client.get(VIRTUAL_SERVICES, "klm-watcher", ns)
    assert vs["spec"]["gateways"] == [f"{ns}/gw-a", f"{ns}/gw-b"]
    assert vs["spec"]["hosts"] == ["a.example.com", "a2.example.com", "b.example.com"]
    assert vs["spec"]["http"] == [
        {
            "name": f"{ns}/klm-watcher",
            "match": [{"uri": {"prefix": f"/v2/{OPERATOR_NAME}/"}}],
            "route": [
                {
                    "destination": {
                        "host": f"klm-controller-manager-events.{ns}.svc.cluster.local",
                        "port": {"number": 8082},
                    }
                }
            ],
        }
    ]
    (owner,) = vs["metadata"]["ownerReferences"]
    assert owner["kind"] == "Watcher" and owner["name"] == "klm-watcher"
    assert owner["uid"] == created["metadata"]["uid"]

    # Steady state: reconciling again writes neither the VirtualService nor the status.
    vs_writes, status_writes = controller.reconciler.vs_writes, controller.reconciler.status_writes
    rv_vs, rv_watcher = vs["metadata"]["resourceVersion"], ready["metadata"]["resourceVersion"]
    for _ in range(3):
        await controller.reconciler.reconcile(Request(ns, "klm-watcher"))
    assert (controller.reconciler.vs_writes, controller.reconciler.status_writes) == (
        vs_writes,
        status_writes,
    )
    assert (await kcp_client.get(VIRTUAL_SERVICES, "klm-watcher", ns))["metadata"]["resourceVersion"] == rv_vs
    assert (await kcp_client.get(WATCHERS, "klm-watcher", ns))["metadata"]["resourceVersion"] == rv_watcher


async def test_gateway_change_and_virtual_service_drift_are_repaired_promptly(
    kcp_client: KubeClient, kcp_namespace: str, controller: WatcherController
) -> None:
    ns = kcp_namespace
    await kcp_client.create(GATEWAYS, gateway("gw", ns, ["old.example.com"]))
    await kcp_client.create(WATCHERS, watcher("w", ns))
    await _wait_state(kcp_client, "w", ns, "Ready")

    # a Gateway host change reaches the VirtualService through the Gateway informer
    await kcp_client.patch(
        GATEWAYS, "gw", {"spec": {"servers": gateway("gw", ns, ["new.example.com"])["spec"]["servers"]}}, ns
    )

    async def hosts_updated() -> bool:
        vs = await _get(kcp_client, VIRTUAL_SERVICES, "w", ns)
        return bool(vs and vs["spec"]["hosts"] == ["new.example.com"])

    await eventually(hosts_updated, within=5.0, what="VirtualService hosts follow the Gateway")

    # an edited VirtualService is put back
    current = await kcp_client.get(VIRTUAL_SERVICES, "w", ns)
    edited = copy.deepcopy(current)
    edited["spec"]["http"][0]["route"][0]["destination"]["port"]["number"] = 9999
    await kcp_client.update(VIRTUAL_SERVICES, edited)

    async def port_restored() -> bool:
        vs = await _get(kcp_client, VIRTUAL_SERVICES, "w", ns)
        return bool(vs and vs["spec"]["http"][0]["route"][0]["destination"]["port"]["number"] == 8082)

    await eventually(port_restored, within=5.0, what="edited VirtualService repaired")

    # a deleted VirtualService is re-created
    uid_before = (await kcp_client.get(VIRTUAL_SERVICES, "w", ns))["metadata"]["uid"]
    await kcp_client.delete(VIRTUAL_SERVICES, "w", ns)

    async def recreated() -> bool:
        vs = await _get(kcp_client, VIRTUAL_SERVICES, "w", ns)
        return bool(vs and vs["metadata"]["uid"] != uid_before)

    await eventually(recreated, within=5.0, what="deleted VirtualService re-created")

    # a spec change of the Watcher (manager) changes the route
    await kcp_client.patch(WATCHERS, "w", {"spec": {"manager": "other-manager"}}, ns)

    async def rerouted() -> bool:
        vs = await _get(kcp_client, VIRTUAL_SERVICES, "w", ns)
        return bool(vs and vs["spec"]["http"][0]["match"][0]["uri"]["prefix"] == "/v2/other-manager/")

    await eventually(rerouted, within=5.0, what="route follows spec.manager")


async def test_deleting_a_watcher_removes_its_virtual_service_and_finalizer(
    kcp_client: KubeClient, kcp_namespace: str, controller: WatcherController
) -> None:
    ns = kcp_namespace
    await kcp_client.create(GATEWAYS, gateway("gw", ns, ["h.example.com"]))
    await kcp_client.create(WATCHERS, watcher("keep", ns))
    await kcp_client.create(WATCHERS, watcher("drop", ns))
    await _wait_state(kcp_client, "keep", ns, "Ready")
    await _wait_state(kcp_client, "drop", ns, "Ready")
    assert await _get(kcp_client, VIRTUAL_SERVICES, "drop", ns) is not None

    await kcp_client.delete(WATCHERS, "drop", ns)

    async def gone() -> bool:
        return (await _get(kcp_client, WATCHERS, "drop", ns)) is None

    await eventually(gone, what="Watcher released by its finalizer and deleted")
    assert await _get(kcp_client, VIRTUAL_SERVICES, "drop", ns) is None
    assert await _get(kcp_client, VIRTUAL_SERVICES, "keep", ns) is not None


async def test_invalid_watchers_report_why(
    kcp_client: KubeClient, kcp_namespace: str, controller: WatcherController
) -> None:
    ns = kcp_namespace
    # no Gateway matches yet
    await kcp_client.create(WATCHERS, watcher("no-gateway", ns))
    failed = await _wait_state(kcp_client, "no-gateway", ns, "Error")
    condition = _condition(failed)
    assert condition["status"] == "False"
    assert condition["reason"] == "GatewayNotFound"
    assert "operator.kyma-project.io/watcher-gateway=default" in condition["message"]

    # a Warning Event explains it too
    async def warning_event() -> list[dict[str, Any]]:
        listed = await kcp_client.list(CORE_EVENTS, ns)
        return [
            e
            for e in listed.items
            if e["reason"] == "GatewayNotFound" and e["involvedObject"]["name"] == "no-gateway"
        ]

    (event,) = await eventually(warning_event, what="GatewayNotFound event")
    assert event["type"] == "Warning"

    # a Gateway without hosts
    hostless = gateway("hostless", ns, [])
    hostless["spec"]["servers"] = []
    await kcp_client.create(GATEWAYS, hostless)

    async def host_missing() -> bool:
        return (
            _condition(await _get(kcp_client, WATCHERS, "no-gateway", ns)).get("reason")
            == "GatewayHostMissing"
        )

    await eventually(host_missing, what="GatewayHostMissing after a hostless Gateway appears")

    # fixing the Gateway makes the Watcher Ready without touching it
    await kcp_client.patch(
        GATEWAYS,
        "hostless",
        {"spec": {"servers": gateway("x", ns, ["fixed.example.com"])["spec"]["servers"]}},
        ns,
    )
    await _wait_state(kcp_client, "no-gateway", ns, "Ready")

    # an empty manager: no spec.manager and no managed-by label
    await kcp_client.create(WATCHERS, watcher("no-manager", ns, manager=""))
    no_manager = await _wait_state(kcp_client, "no-manager", ns, "Error")
    assert _condition(no_manager)["reason"] == "ManagerMissing"
    assert "spec.manager" in _condition(no_manager)["message"]
    assert await _get(kcp_client, VIRTUAL_SERVICES, "no-manager", ns) is None

    # the label fallback fixes it
    await kcp_client.patch(
        WATCHERS, "no-manager", {"metadata": {"labels": {names.MANAGED_BY_LABEL: "lm"}}}, ns
    )
    await _wait_state(kcp_client, "no-manager", ns, "Ready")
    vs = await kcp_client.get(VIRTUAL_SERVICES, "no-manager", ns)
    assert vs["spec"]["http"][0]["match"][0]["uri"]["prefix"] == "/v2/lm/"

    # a manager that cannot be a path segment, and a bad resource name
    await kcp_client.create(
        WATCHERS,
        watcher(
            "bad-names",
            ns,
            manager="Life/Cycle",
            resourceToWatch={"group": "", "version": "v1", "resource": "ConfigMap"},
        ),
    )
    bad = await _wait_state(kcp_client, "bad-names", ns, "Error")
    assert _condition(bad)["reason"] == "InvalidManager"
    assert "'ConfigMap'" in _condition(bad)["message"]


@pytest.mark.parametrize(
    ("service_info", "needle"),
    [
        ({"name": "", "namespace": KCP_NAMESPACE, "port": 8082}, "spec.serviceInfo.name"),
        ({"name": "svc", "namespace": KCP_NAMESPACE, "port": 0}, "spec.serviceInfo.port"),
        ({"name": "svc", "namespace": KCP_NAMESPACE, "port": 70000}, "spec.serviceInfo.port"),
        ({"name": "svc", "port": 8082}, "spec.serviceInfo.namespace"),
    ],
)
async def test_api_server_rejects_invalid_service_info(
    kcp_client: KubeClient, kcp_namespace: str, service_info: dict[str, Any], needle: str
) -> None:
    with pytest.raises(Invalid) as caught:
        await kcp_client.create(WATCHERS, watcher("invalid", kcp_namespace, serviceInfo=service_info))
    assert needle in caught.value.message
    assert await _get(kcp_client, WATCHERS, "invalid", kcp_namespace) is None
