"""An operator restart in the middle of a rollout loses nothing and repeats nothing
(docs/rollouts.md §12, §15).

The operator runs as a real process (``python -m kyma_operator``, leader election on). While the
canary wave soaks it is killed with SIGKILL (no chance to finish anything) and a new process takes
over. The run must go on from what its status recorded: the canary wave's ``soakStartedAt`` is the
one the first process wrote, every Kyma's Manifest gets exactly one spec write for the new version,
and no transition's event is recorded twice.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.operator_process import OperatorProcess
from tests.integration.rollouts.fleet import (
    KYMA_COUNT,
    NEW,
    OLD,
    create_policy,
    events_of,
    fleet_at,
    manifests_of,
    publish,
    rollout_name,
    run_history,
    run_in_phase,
    runtimes,
    set_channel,
)
from tests.polling import eventually

FLAGS = (
    "--manifest-controller-enabled=false",
    "--watcher-enabled=false",
    "--listener-enabled=false",
    "--kyma-healthy-interval=3600",
    "--kyma-unhealthy-interval=3600",
    "--module-upgrade-rollout-max-delay=1",
)


@pytest.fixture
async def processes(kcp_crds: APIServer, kcp_namespace: str) -> AsyncIterator[list[OperatorProcess]]:
    started: list[OperatorProcess] = []
    try:
        yield started
    finally:
        for process in started:
            await process.stop()


async def start(kcp: APIServer, ns: str, processes: list[OperatorProcess]) -> OperatorProcess:
    process = await OperatorProcess.start(Path(kcp.kubeconfig_path), ns, *FLAGS)
    processes.append(process)
    return process


async def test_restart_during_soak(
    kcp_client: KubeClient, kcp_crds: APIServer, kcp_namespace: str, processes: list[OperatorProcess]
) -> None:
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    first = await start(kcp_crds, ns, processes)
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}) as sim:
        await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak="3s", deadline="20s")
        async with run_history(kcp_client, ns) as history:
            await set_channel(kcp_client, ns, {"regular": NEW})
            soaking = await eventually(
                lambda: run_in_phase(kcp_client, ns, name, "Soaking"), "the canary wave soaking", within=40
            )
            first.signal(signal.SIGKILL)
            await first.wait(10)
            assert soaking["status"]["frontier"]["wave"] == 0
            soak_started = soaking["status"]["soakStartedAt"]

            await start(kcp_crds, ns, processes)
            await eventually(
                lambda: run_in_phase(kcp_client, ns, name, "Completed"), "the run Completed", within=60
            )
        # the canary wave's soak start survived the restart: every write with wave 0 soaking has it
        canary_soaks = {
            (obj.get("status") or {}).get("soakStartedAt")
            for obj in history
            if ((obj.get("status") or {}).get("frontier") or {}).get("wave") == 0
            and (obj.get("status") or {}).get("soakStartedAt")
        }
        assert canary_soaks == {soak_started}, canary_soaks

        manifests = await manifests_of(kcp_client, ns)
        assert {m["spec"]["version"] for m in manifests.values()} == {NEW}
        assert sorted(sim.spec_writes.values()) == [2] * KYMA_COUNT, sim.spec_writes
        events = await events_of(kcp_client, ns, name)
        transitions = Counter((e["reason"], e["message"]) for e in events)
        assert set(transitions.values()) == {1}, transitions
        reasons = Counter(e["reason"] for e in events)
        assert reasons["RolloutStarted"] == 1 and reasons["WaveReleased"] == 3, reasons
