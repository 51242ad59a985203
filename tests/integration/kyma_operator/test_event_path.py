"""End to end on real API servers: an edit of the runtime's Kyma reaches exactly its KCP Kyma.

SKR API server --admission--> agent (in-process, credentials read back from the Secret the operator
installed) --signed event--> listener (inside the operator) --> targeted Kyma reconcile. A second
runtime with its own Kyma is set up the same way and must not be reconciled.
"""

from __future__ import annotations

from pathlib import Path

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
from tests.polling import eventually


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
    config = operator_config(
        ns, listener_enabled=True, webhook_urls={"kyma-a": f"https://127.0.0.1:{agent_port}"}
    )
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
