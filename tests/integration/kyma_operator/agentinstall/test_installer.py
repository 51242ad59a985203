"""Agent installation into a real SKR API server, from Watcher CRs in a real KCP.

Each test uses its own sync namespace and webhook configuration name, so the shared SKR API server
is not disturbed, and removes what it installed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from kyma_operator.agentinstall.installer import (
    PRIORITY_CLASSES,
    AgentInstaller,
    InstallerConfig,
    KymaRef,
)
from kyma_operator.api import names
from kyma_operator.api.resources import WATCHERS
from kyma_operator.identity.store import IdentityConfig, IdentityStore
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import (
    DEPLOYMENTS,
    NAMESPACES,
    NETWORK_POLICIES,
    PODS,
    SECRETS,
    SERVICES,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from kyma_wire.names import OPERATOR_NAME
from tests.integration.kyma_operator.identity.helpers import WallClock
from tests.polling import eventually

T0 = datetime.datetime(2026, 7, 1, tzinfo=datetime.UTC)


def watcher_body(name: str, namespace: str, *, label: str, field: str = "spec") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "manager": OPERATOR_NAME,
            "labelsToWatch": {"test.kyma-project.io/watched": label},
            "resourceToWatch": {"group": "", "version": "v1", "resource": "configmaps"},
            "field": field,
            "serviceInfo": {"name": "events", "namespace": namespace, "port": 8082},
            "gateway": {"selector": {"matchLabels": {names.WATCHER_GATEWAY_LABEL: "default"}}},
        },
    }


@dataclass
class Setup:
    installer: AgentInstaller
    watchers: Informer
    kyma: KymaRef
    sync_ns: str
    vwc_name: str
    clock: WallClock


@pytest.fixture
async def setup(kcp_client: KubeClient, kcp_namespace: str, skr_client: KubeClient) -> AsyncIterator[Setup]:
    clock = WallClock(T0)
    identity = IdentityStore(
        kcp_client,
        config=IdentityConfig(
            namespace=kcp_namespace, public_key_namespace=kcp_namespace, server_names=("listener.test",)
        ),
        wall_clock=clock,
    )
    sync_ns = f"{kcp_namespace}-skr"
    vwc_name = f"{kcp_namespace}-webhook"
    watchers = Informer(kcp_client, WATCHERS, namespace=kcp_namespace)
    installer = AgentInstaller(
        identity=identity,
        watchers=watchers,
        config=InstallerConfig(
            kcp_addr="listener.test:443",
            sync_namespace=sync_ns,
            image="registry.test/skr-watcher:1.2.3",
            watcher_namespace=kcp_namespace,
            webhook_configuration_name=vwc_name,
        ),
        wall_clock=clock,
    )
    task = asyncio.create_task(watchers.run())
    try:
        assert await watchers.wait_synced(10.0)
        yield Setup(
            installer,
            watchers,
            KymaRef(name="kyma-1", runtime_id="rt-1", skr_domain="rt1.test"),
            sync_ns,
            vwc_name,
            clock,
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(NotFound):
            await skr_client.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, vwc_name)


async def _wait_watchers(setup: Setup, count: int) -> None:
    async def seen() -> bool:
        return len(setup.watchers.list()) == count

    await eventually(seen, what=f"{count} Watchers in the informer")


async def _versions(skr: KubeClient, s: Setup) -> dict[str, str]:
    out: dict[str, str] = {}
    for res in (SECRETS, SERVICES, DEPLOYMENTS, NETWORK_POLICIES):
        for item in (await skr.list(res, s.sync_ns)).items:
            out[f"{res.kind}/{item['metadata']['name']}"] = item["metadata"]["resourceVersion"]
    vwc = await skr.get(VALIDATING_WEBHOOK_CONFIGURATIONS, s.vwc_name)
    out["vwc"] = vwc["metadata"]["resourceVersion"]
    out["ns"] = (await skr.get(NAMESPACES, s.sync_ns))["metadata"]["resourceVersion"]
    return out


async def test_install_update_prune_steady_state_and_remove(
    kcp_client: KubeClient, kcp_namespace: str, skr_client: KubeClient, setup: Setup
) -> None:
    await kcp_client.create(WATCHERS, watcher_body("w-one", kcp_namespace, label="one"))
    await _wait_watchers(setup, 1)

    status = await setup.installer.ensure(setup.kyma, skr_client)
    assert not status.ready and not status.error
    assert status.reason == "DeploymentNotReady"  # no controller-manager runs: nothing becomes available
    # the PriorityClass is cluster-wide and may exist from an earlier test with identical content
    assert {a for a in status.applied if not a.startswith("PriorityClass/")} == {
        f"Namespace/{setup.sync_ns}",
        "Secret/skr-webhook-tls",
        "Service/skr-webhook",
        "Service/skr-webhook-metrics",
        "Deployment/skr-webhook",
        "NetworkPolicy/kyma-project.io--seed-to-watcher",
        "NetworkPolicy/kyma-project.io--watcher-to-apiserver",
        "NetworkPolicy/kyma-project.io--metrics-to-watcher",
        "NetworkPolicy/kyma-project.io--watcher-to-dns",
        f"ValidatingWebhookConfiguration/{setup.vwc_name}",
    }

    ns = setup.sync_ns
    deployment = await skr_client.get(DEPLOYMENTS, "skr-webhook", ns)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.test/skr-watcher:1.2.3"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KCP_ADDR"] == "listener.test:443" and env["RUNTIME_ID"] == "rt-1"
    trigger = deployment["spec"]["template"]["metadata"]["labels"][names.POD_RESTART_TRIGGER_LABEL]
    assert trigger
    secret = await skr_client.get(SECRETS, "skr-webhook-tls", ns)
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt", "signing.key", "signing.keyid"}
    assert base64.b64decode(secret["data"]["signing.keyid"]) == b"rt-1:v1"
    assert {s["metadata"]["name"] for s in (await skr_client.list(SERVICES, ns)).items} == {
        "skr-webhook",
        "skr-webhook-metrics",
    }
    assert len((await skr_client.list(NETWORK_POLICIES, ns)).items) == 4
    await skr_client.get(PRIORITY_CLASSES, "skr-webhook-priority")
    vwc = await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, setup.vwc_name)
    (webhook,) = vwc["webhooks"]
    assert webhook["name"] == f"{kcp_namespace}.w-one.operator.kyma-project.io"
    assert webhook["objectSelector"] == {"matchLabels": {"test.kyma-project.io/watched": "one"}}
    assert webhook["rules"][0]["resources"] == ["configmaps"]
    assert webhook["clientConfig"]["service"] == {
        "name": "skr-webhook",
        "namespace": ns,
        "path": f"/validate/{OPERATOR_NAME}",
        "port": 443,
    }
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == base64.b64decode(secret["data"]["ca.crt"])

    # steady state: reads, no writes
    before = await _versions(skr_client, setup)
    writes = setup.installer.writes
    again = await setup.installer.ensure(setup.kyma, skr_client)
    assert again.applied == ()
    assert setup.installer.writes == writes
    assert await _versions(skr_client, setup) == before

    # a second Watcher adds a webhook, and only the webhook configuration is written
    await kcp_client.create(WATCHERS, watcher_body("w-two", kcp_namespace, label="two", field="status"))
    await _wait_watchers(setup, 2)
    added = await setup.installer.ensure(setup.kyma, skr_client)
    assert added.applied == (f"ValidatingWebhookConfiguration/{setup.vwc_name}",)
    vwc = await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, setup.vwc_name)
    assert [w["name"] for w in vwc["webhooks"]] == [
        f"{kcp_namespace}.w-one.operator.kyma-project.io",
        f"{kcp_namespace}.w-two.operator.kyma-project.io",
    ]
    assert vwc["webhooks"][1]["rules"][0]["resources"] == ["configmaps/status"]

    # an invalid Watcher is left out instead of breaking the configuration
    await kcp_client.create(
        WATCHERS,
        watcher_body("w-bad", kcp_namespace, label="bad")
        | {"metadata": {"name": "w-bad", "namespace": kcp_namespace, "labels": {}}},
    )
    await kcp_client.patch(WATCHERS, "w-bad", {"spec": {"manager": "Not A Path"}}, kcp_namespace)
    await _wait_watchers(setup, 3)
    assert (await setup.installer.ensure(setup.kyma, skr_client)).applied == ()

    # removing the first Watcher prunes its webhook
    await kcp_client.delete(WATCHERS, "w-one", kcp_namespace)
    await _wait_watchers(setup, 2)
    pruned = await setup.installer.ensure(setup.kyma, skr_client)
    assert pruned.applied == (f"ValidatingWebhookConfiguration/{setup.vwc_name}",)
    vwc = await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, setup.vwc_name)
    assert [w["name"] for w in vwc["webhooks"]] == [f"{kcp_namespace}.w-two.operator.kyma-project.io"]

    # drift in the runtime is repaired: a deleted Deployment and an edited Secret
    await skr_client.delete(DEPLOYMENTS, "skr-webhook", ns)
    secret = await skr_client.get(SECRETS, "skr-webhook-tls", ns)
    secret["data"]["tls.key"] = base64.b64encode(b"tampered").decode()
    await skr_client.update(SECRETS, secret)
    repaired = await setup.installer.ensure(setup.kyma, skr_client)
    assert set(repaired.applied) == {"Deployment/skr-webhook", "Secret/skr-webhook-tls"}
    assert b"PRIVATE KEY" in base64.b64decode(
        (await skr_client.get(SECRETS, "skr-webhook-tls", ns))["data"]["tls.key"]
    )

    # remove: everything of the agent goes, in the runtime and in KCP; the namespace stays
    await setup.installer.remove(setup.kyma, skr_client)
    for res, name, namespace in [
        (VALIDATING_WEBHOOK_CONFIGURATIONS, setup.vwc_name, None),
        (DEPLOYMENTS, "skr-webhook", ns),
        (SECRETS, "skr-webhook-tls", ns),
        (SERVICES, "skr-webhook", ns),
        (SERVICES, "skr-webhook-metrics", ns),
    ]:
        with pytest.raises(NotFound):
            await skr_client.get(res, name, namespace)
    assert (await skr_client.list(NETWORK_POLICIES, ns)).items == []
    kcp_secrets = {s["metadata"]["name"] for s in (await kcp_client.list(SECRETS, kcp_namespace)).items}
    assert kcp_secrets == {"klm-watcher", "klm-istio-gateway"}
    await skr_client.get(NAMESPACES, ns)


async def test_rotation_rolls_the_pod_and_readiness_is_reported(
    kcp_client: KubeClient, kcp_namespace: str, skr_client: KubeClient, setup: Setup
) -> None:
    await kcp_client.create(WATCHERS, watcher_body("w", kcp_namespace, label="x"))
    await _wait_watchers(setup, 1)
    first = await setup.installer.ensure(setup.kyma, skr_client)
    assert first.requeue_after is not None and first.requeue_after <= 30.0
    ns = setup.sync_ns
    deployment = await skr_client.get(DEPLOYMENTS, "skr-webhook", ns)
    trigger = deployment["spec"]["template"]["metadata"]["labels"][names.POD_RESTART_TRIGGER_LABEL]

    # the CA rotates (day 29): the runtime certificate is re-issued, Secret and pod template change
    setup.clock.advance(datetime.timedelta(days=29))
    rotated = await setup.installer.ensure(setup.kyma, skr_client)
    assert {"Secret/skr-webhook-tls", "Deployment/skr-webhook"} <= set(rotated.applied)
    assert f"ValidatingWebhookConfiguration/{setup.vwc_name}" in rotated.applied  # caBundle gained the new CA
    deployment = await skr_client.get(DEPLOYMENTS, "skr-webhook", ns)
    assert deployment["spec"]["template"]["metadata"]["labels"][names.POD_RESTART_TRIGGER_LABEL] != trigger
    assert deployment["metadata"]["annotations"][names.SKR_WEBHOOK_HASH_ANNOTATION]

    # a pod in CrashLoopBackOff makes it an error (the Kyma goes to Error)
    pod = await skr_client.create(
        PODS,
        {
            "metadata": {"name": "skr-webhook-abc", "namespace": ns, "labels": {"app": "skr-webhook"}},
            "spec": {"containers": [{"name": "server", "image": "registry.test/skr-watcher:1.2.3"}]},
        },
    )
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "server",
                "image": "registry.test/skr-watcher:1.2.3",
                "imageID": "",
                "ready": False,
                "restartCount": 5,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}},
                "lastState": {},
            }
        ],
    }
    await skr_client.update_status(PODS, pod)
    crashing = await setup.installer.ensure(setup.kyma, skr_client)
    assert crashing.error and crashing.reason == "CrashLoopBackOff"
    assert "skr-webhook-abc" in crashing.message

    # a ready replica makes it ready (and no pod list is needed)
    deployment["status"] = {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}
    await skr_client.update_status(DEPLOYMENTS, deployment)
    ready = await setup.installer.ensure(setup.kyma, skr_client)
    assert ready.ready and not ready.error and ready.applied == ()
    assert ready.condition_status == "True"
    await skr_client.delete(PODS, "skr-webhook-abc", ns)
    await setup.installer.remove(setup.kyma, skr_client)


async def test_invalid_runtime_is_an_error_and_writes_nothing(
    kcp_client: KubeClient, kcp_namespace: str, skr_client: KubeClient, setup: Setup
) -> None:
    status = await setup.installer.ensure(KymaRef(name="no-domain", runtime_id="rt-x"), skr_client)
    assert status.error and status.reason == "InvalidRuntime"
    assert "skr-domain" in status.message
    with pytest.raises(NotFound):
        await skr_client.get(NAMESPACES, setup.sync_ns)
    assert (await kcp_client.list(SECRETS, kcp_namespace)).items == []
