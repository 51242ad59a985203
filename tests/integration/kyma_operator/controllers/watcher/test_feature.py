"""The assembled watcher mechanism under the runtime's Manager, as the operator's main runs it."""

from __future__ import annotations

import asyncio
import contextlib

from kyma_operator.agentinstall.installer import InstallerConfig
from kyma_operator.api import names
from kyma_operator.api.resources import WATCHERS, resource_for
from kyma_operator.controllers.watcher.feature import WatcherFeatureConfig, build_watcher_feature
from kyma_operator.controllers.watcher.reconciler import WatcherControllerConfig
from kyma_operator.identity.store import IdentityConfig
from kyma_operator.runtime.controller import Controller
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.manager import Manager
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS
from tests.integration.kyma_operator.controllers.watcher.test_watcher_controller import (
    GATEWAYS,
    VIRTUAL_SERVICES,
    gateway,
    watcher,
)
from tests.polling import eventually

KYMAS = resource_for(names.KYMA)


class Idle:
    async def reconcile(self, request: Request) -> Result:
        return Result()


async def test_feature_under_a_manager(
    kcp_client: KubeClient, kcp_namespace: str, skr_client: KubeClient
) -> None:
    ns = kcp_namespace
    kyma = await kcp_client.create(
        KYMAS,
        {
            "metadata": {
                "name": "kyma-f",
                "namespace": ns,
                "labels": {names.RUNTIME_ID_LABEL: "rt-f"},
                "annotations": {names.SKR_DOMAIN_ANNOTATION: "rt-f.example.com"},
            },
            "spec": {"channel": "regular"},
        },
    )
    await kcp_client.create(GATEWAYS, gateway("gw", ns, ["listener.example.com"]))
    vwc_name = f"{ns}-webhook"
    kymas = Informer(kcp_client, KYMAS, namespace=ns)
    feature = build_watcher_feature(
        kcp_client,
        WatcherFeatureConfig(
            controller=WatcherControllerConfig(namespace=ns),
            identity=IdentityConfig(
                namespace=ns, public_key_namespace=ns, server_names=("listener.example.com",)
            ),
            installer=InstallerConfig(
                kcp_addr="listener.example.com:443",
                sync_namespace=f"{ns}-skr",
                webhook_configuration_name=vwc_name,
            ),
            fanout_debounce=0.05,
        ),
        kymas=kymas,
    )
    kyma_controller = Controller("kyma", Idle())
    kyma_controller.add_source(feature.fanout)
    kyma_queue = kyma_controller.queue
    fanout = feature.fanout
    manager = Manager(kcp_client, name="watcher-feature-test", namespace=ns, health_port=None)
    manager.add_informer(kymas)
    feature.add_to(manager)
    run = asyncio.create_task(manager.run())
    try:
        await asyncio.wait_for(manager.started.wait(), 10.0)

        # the rotator bootstraps the PKI without any Kyma reconcile
        async def pki_ready() -> bool:
            names_ = {s["metadata"]["name"] for s in (await kcp_client.list(SECRETS, ns)).items}
            return {"klm-watcher", "klm-istio-gateway"} <= names_

        await eventually(pki_ready, what="CA and gateway Secrets")

        # a Watcher: VirtualService, and a fan-out to the Kyma
        await kcp_client.create(WATCHERS, watcher("w", ns))

        async def served() -> bool:
            try:
                await kcp_client.get(VIRTUAL_SERVICES, "w", ns)
            except NotFound:
                return False
            return kyma_queue.is_queued(Request(ns, "kyma-f"))

        await eventually(served, what="VirtualService and Kyma re-render enqueued")
        assert fanout.fanouts >= 1

        # what the Kyma reconcile does with the installer
        status = await feature.installer.ensure(kyma, skr_client)
        assert not status.error, status.message
        vwc = await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, vwc_name)
        assert [w["name"] for w in vwc["webhooks"]] == [f"{ns}.w.operator.kyma-project.io"]
        await feature.installer.remove(kyma, skr_client)
    finally:
        await manager.shutdown()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        with contextlib.suppress(NotFound):
            await skr_client.delete(VALIDATING_WEBHOOK_CONFIGURATIONS, vwc_name)
