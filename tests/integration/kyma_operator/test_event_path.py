"""End to end on real API servers: an edit of the runtime's Kyma reaches exactly its KCP Kyma.

SKR API server --admission--> agent (in-process, credentials read back from the Secret the operator
installed) --signed event--> listener (inside the operator) --> targeted Kyma reconcile. A second
runtime with its own Kyma is set up the same way and must not be reconciled. And the agent's first
heartbeat wakes its Kyma, whose last reconcile saw no agent, without waiting for the sweep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kyma_operator.config import OperatorConfig
from kyma_operator.controllers.kyma.status import WATCHER_HEARTBEAT
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request
from tests.controlplane.cluster import APIServer, free_port
from tests.integration.kyma_operator.harness import (
    KYMAS,
    create_runtime,
    operator_config,
    running_operator,
    runtime_agent,
    settled,
)
from tests.integration.kyma_operator.modules_env import condition_of
from tests.polling import eventually


def _with_listener(ns: str, agent_port: int, **overrides: Any) -> OperatorConfig:
    """The operator with its listener; kyma-a's agent listens on ``agent_port``."""
    webhook_urls = {"kyma-a": f"https://127.0.0.1:{agent_port}"}
    return operator_config(ns, listener_enabled=True, webhook_urls=webhook_urls, **overrides)


async def test_runtime_kyma_edit_reconciles_exactly_that_kyma(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_b_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    skr_a, skr_b = skr_crds
    agent_port = free_port()
    config = _with_listener(ns, agent_port)
    async with running_operator(kcp_client, config, skrs=(skr_client, skr_b_client)) as running:
        await create_runtime(kcp_client, ns, "kyma-a", "rt-a", skr_a.kubeconfig)
        await create_runtime(kcp_client, ns, "kyma-b", "rt-b", skr_b.kubeconfig)
        await settled(running, "kyma-a", "kyma-b")
        # the runtime's "kubelet": run the agent with what the operator installed
        async with runtime_agent(running, skr_client, "rt-a", agent_port, tmp_path / "ssl") as agent:
            assert running.routed == []
            mark = len(running.reports)

            # a user edits the runtime's Kyma
            await skr_client.patch(KYMAS, "default", {"spec": {"channel": "fast"}}, running.sync_namespace)

            await running.wait_report(
                lambda r: r.request.name == "kyma-a" and KymaTrigger.RUNTIME_EVENT in r.triggers,
                what="the targeted reconcile of kyma-a",
                after=mark,
            )
            # The agent reports in the admission call, before the API server stores the edit: if
            # the reconcile was faster than the write, it looks again shortly after.
            await running.wait_report(
                lambda r: r.request.name == "kyma-a" and "channel=fast" in r.remote_spec,
                what="kyma-a reconciled with the runtime's new spec",
                after=mark,
            )
            assert running.routed == [Request(ns, "kyma-a")]
            assert [r for r in running.reports[mark:] if r.request.name == "kyma-b"] == []
            # the listener enqueues before it answers: the agent counts the event once the answer is in
            sent = agent.metrics.registry
            await eventually(lambda: sent.get_sample_value("watcher_events_sent_total"), "the agent's count")
            assert sent.get_sample_value("watcher_events_sent_total") == 1


async def test_the_agents_first_heartbeat_wakes_its_kyma_before_any_sweep(
    kcp_client: KubeClient,
    kcp_namespace: str,
    skr_client: KubeClient,
    skr_crds: tuple[APIServer, APIServer],
    tmp_path: Path,
) -> None:
    ns = kcp_namespace
    skr_a, _ = skr_crds
    agent_port = free_port()
    # an hour between sweeps: the sweep cannot be what wakes the Kyma here
    config = _with_listener(ns, agent_port, heartbeat_sweep_interval=3600.0)
    async with running_operator(kcp_client, config, skrs=(skr_client,)) as running:
        await create_runtime(kcp_client, ns, "kyma-a", "rt-a", skr_a.kubeconfig)
        await settled(running, "kyma-a")
        sweep = running.operator.kyma.sweep
        assert sweep is not None
        before = condition_of(await kcp_client.get(KYMAS, "kyma-a", ns), WATCHER_HEARTBEAT)
        assert before is not None and before["status"] == "False", before
        mark = len(running.reports)
        # one heartbeat at the agent's start, the next an hour later; no resync event at start
        async with runtime_agent(
            running, skr_client, "rt-a", agent_port, tmp_path / "ssl", HEARTBEAT_INTERVAL="3600"
        ):
            woken = await running.wait_report(
                lambda r: r.request.name == "kyma-a" and KymaTrigger.HEARTBEAT in r.triggers,
                what="kyma-a reconciled because its agent's heartbeat arrived",
                after=mark,
            )

            async def alive() -> dict[str, object] | None:
                found = condition_of(await kcp_client.get(KYMAS, "kyma-a", ns), WATCHER_HEARTBEAT)
                return found if found is not None and found["status"] == "True" else None

            await eventually(alive, "SKRWatcherHeartbeat True in KCP")
        assert woken.triggers == (KymaTrigger.HEARTBEAT,), woken.triggers
        assert (sweep.sweeps, sweep.revived) == (0, 1)
        changes = running.operator.manager.registry.get_sample_value(
            "kyma_operator_agent_health_changes_total", {"now": "alive", "noticed_by": "heartbeat"}
        )
        assert changes == 1
        assert running.routed == []  # no event was sent: the heartbeat alone woke it
