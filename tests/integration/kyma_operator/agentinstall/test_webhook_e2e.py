"""The installed webhook works for real: SKR API server -> agent -> signed event -> KCP listener.

Everything is real except where the agent runs: the installer renders and applies the agent's
objects into the SKR API server (webhook clientConfig in URL mode, pointing at 127.0.0.1), the agent
(``skr_watcher.agent.Agent``) runs in-process with exactly the certificate, CA bundle and signing key
read back from the Secret the installer wrote, and the listener verifies the event with the public
key the operator published in KCP.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

from kyma_operator.agentinstall.installer import AgentInstaller, InstallerConfig
from kyma_operator.api import names
from kyma_operator.api.resources import WATCHERS, resource_for
from kyma_operator.identity.store import IdentityConfig, IdentityStore
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import CONFIGMAPS, SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS
from skr_watcher.agent import Agent
from tests.controlplane.cluster import free_port
from tests.integration.kyma_operator.agentinstall.test_installer import watcher_body
from tests.integration.kyma_operator.identity.e2e import agent_config, running_listener, write_agent_files
from tests.polling import eventually

KYMAS = resource_for(names.KYMA)


async def test_skr_api_server_calls_the_installed_agent_which_delivers_a_signed_event(
    kcp_client: KubeClient, kcp_namespace: str, skr_client: KubeClient, tmp_path: Path
) -> None:
    ns = kcp_namespace
    kyma = await kcp_client.create(
        KYMAS,
        {
            "metadata": {
                "name": "kyma-e2e",
                "namespace": ns,
                "labels": {names.RUNTIME_ID_LABEL: "rt-e2e"},
                "annotations": {names.SKR_DOMAIN_ANNOTATION: "rt-e2e.example.com"},
            },
            "spec": {"channel": "regular"},
        },
    )
    await kcp_client.create(WATCHERS, watcher_body("cm-watcher", ns, label="e2e"))
    watchers = Informer(kcp_client, WATCHERS, namespace=ns)
    watchers_task = asyncio.create_task(watchers.run())
    agent_port = free_port()
    sync_ns, vwc_name = f"{ns}-skr", f"{ns}-webhook"
    identity = IdentityStore(
        kcp_client,
        config=IdentityConfig(
            namespace=ns,
            public_key_namespace=ns,
            server_names=("listener.test",),
            additional_dns_names=("127.0.0.1",),  # the API server calls the agent by IP
        ),
        wall_clock=lambda: datetime.datetime.now(datetime.UTC),
    )
    stop = asyncio.Event()
    agent_task: asyncio.Task[None] | None = None
    installer: AgentInstaller | None = None
    try:
        assert await watchers.wait_synced(10.0)
        async with running_listener(kcp_client, ns) as running:
            installer = AgentInstaller(
                identity=identity,
                watchers=watchers,
                config=InstallerConfig(
                    kcp_addr=f"127.0.0.1:{running.port}",
                    sync_namespace=sync_ns,
                    watcher_namespace=ns,
                    webhook_configuration_name=vwc_name,
                    webhook_url=f"https://127.0.0.1:{agent_port}",
                ),
            )
            status = await installer.ensure(kyma, skr_client)
            assert not status.error, status.message

            # the agent runs with what the installer put into the runtime
            secret = await skr_client.get(SECRETS, "skr-webhook-tls", sync_ns)
            files = write_agent_files(secret, tmp_path / "ssl")
            agent = Agent(
                agent_config(
                    files, kcp_addr=f"127.0.0.1:{running.port}", scheme="http", WEBHOOK_PORT=str(agent_port)
                )
            )
            agent_task = asyncio.create_task(agent.run(stop))
            await asyncio.wait_for(agent.started.wait(), 10.0)

            async def key_known() -> bool:
                return bool(running.listener.keys.public_keys("rt-e2e:v1"))

            await eventually(key_known, what="listener trusts the published key")

            # a watched object changes in the runtime: the API server calls the agent
            await skr_client.create(
                CONFIGMAPS,
                {
                    "metadata": {
                        "name": "watched",
                        "namespace": sync_ns,
                        "labels": {"test.kyma-project.io/watched": "e2e"},
                    },
                    "data": {"k": "v"},
                },
            )
            # ... and an unwatched one does not
            await skr_client.create(
                CONFIGMAPS, {"metadata": {"name": "unwatched", "namespace": sync_ns}, "data": {"k": "v"}}
            )

            async def delivered() -> bool:
                return Request(ns, "kyma-e2e") in running.kymas.items

            await eventually(delivered, what="the Kyma enqueued by the listener")
            registry = agent.metrics.registry
            assert (registry.get_sample_value("watcher_admission_request_total") or 0) >= 1
            # the listener enqueues before it answers: the agent counts the event once the answer is in
            sent = "watcher_events_sent_total"
            await eventually(lambda: registry.get_sample_value(sent), what="the agent counted its event")
            assert registry.get_sample_value(sent) == 1
            assert running.kymas.items == [Request(ns, "kyma-e2e")]
            assert running.manifests.items == []
    finally:
        stop.set()
        if agent_task is not None:
            await asyncio.gather(agent_task, return_exceptions=True)
        watchers_task.cancel()
        await asyncio.gather(watchers_task, return_exceptions=True)
        if installer is not None:
            await installer.remove(kyma, skr_client)
        try:
            await skr_client.get(VALIDATING_WEBHOOK_CONFIGURATIONS, vwc_name)
            raise AssertionError("remove() left the webhook configuration behind")
        except NotFound:
            pass
