"""An operator restart or a shard move in the middle of a rollout loses nothing and repeats nothing
(docs/rollouts.md §12, §15).

The operator runs as real processes (``python -m kyma_operator``, leader election on). While the
canary wave soaks, the one process is killed with SIGKILL (no chance to finish anything) and a new
one takes over; or, with three sharded replicas, the leader and another shard holder are stopped
(SIGTERM) and the last replica takes over leadership and every shard. The run must go on from
what its status recorded: the canary wave's ``soakStartedAt`` is the one first written, every
Kyma's Manifest gets exactly one spec write for the new version, and no transition's event is
recorded twice.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.rollouts import waves
from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.harness import operator_config, running_operator
from tests.integration.kyma_operator.operator_process import OperatorProcess
from tests.integration.rollouts.conftest import rollout_config
from tests.integration.rollouts.fleet import (
    KYMA_COUNT,
    NEW,
    OLD,
    create_policy,
    events_of,
    fleet_at,
    frontier_moves,
    kymas_of,
    manifests_of,
    publish,
    rollout_name,
    run_history,
    run_in_phase,
    runtimes,
    set_channel,
)
from tests.integration.sharding.fleet import SHARDS, Fleet, holders, leader, settled
from tests.polling import eventually

REPLICAS = ("r0", "r1", "r2")
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
        await _nothing_lost_nothing_repeated(kcp_client, ns, name, history, soak_started, sim.spec_writes)


async def _counted_whole_fleet(kcp: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    """The run, once its counts cover the whole fleet as Ready (every Kyma of every shard)."""
    run = await run_in_phase(kcp, ns, name, "Completed")
    status = (run or {}).get("status") or {}
    totals = status.get("totals") or {}
    members = sum(wave.get("members") or 0 for wave in status.get("waves") or [])
    whole = totals.get("members") == totals.get("upgraded") == totals.get("ready") == KYMA_COUNT
    return run if whole and members == KYMA_COUNT else None


async def _nothing_lost_nothing_repeated(
    kcp: KubeClient,
    ns: str,
    name: str,
    history: list[dict[str, Any]],
    soak_started: str,
    spec_writes: dict[str, int],
) -> None:
    # the canary wave's soak start survived: every write with wave 0 soaking has the first one
    canary_soaks = {
        (obj.get("status") or {}).get("soakStartedAt")
        for obj in history
        if ((obj.get("status") or {}).get("frontier") or {}).get("wave") == 0
        and (obj.get("status") or {}).get("soakStartedAt")
    }
    assert canary_soaks == {soak_started}, canary_soaks
    manifests = await manifests_of(kcp, ns)
    assert {m["spec"]["version"] for m in manifests.values()} == {NEW}
    assert sorted(spec_writes.values()) == [2] * KYMA_COUNT, spec_writes
    events = await events_of(kcp, ns, name)
    transitions = Counter((e["reason"], e["message"]) for e in events)
    assert set(transitions.values()) == {1}, transitions
    reasons = Counter(e["reason"] for e in events)
    assert reasons["RolloutStarted"] == 1 and reasons["WaveReleased"] == 3, reasons


@pytest.mark.parametrize("scoped", [False, True], ids=["shared-caches", "shard-scoped-caches"])
async def test_shard_move_during_wave(
    kcp_client: KubeClient, kcp_crds: APIServer, kcp_namespace: str, tmp_path: Path, scoped: bool
) -> None:
    """With ``--shard-scoped-caches`` each replica caches only its shards' Kymas and Manifests;
    the leader counts the fleet from informers of its own that keep only what rollouts read
    (``rollouts/fleet_view.py``): the run's counts still cover every Kyma of the fleet."""
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    extra = (f"--shard-scoped-caches={str(scoped).lower()}",)
    fleet = Fleet(Path(kcp_crds.kubeconfig_path), ns, tmp_path / "trace.log", *FLAGS, *extra)
    try:
        for replica in REPLICAS:
            await fleet.start(replica)
        await fleet.wait_joined(*REPLICAS)

        async def split() -> dict[int, str] | None:
            found = await holders(kcp_client, ns)
            return found if settled(found, REPLICAS) else None

        await eventually(split, "the shards spread over r0, r1, r2", within=60, interval=0.2)
        async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}) as sim:
            await fleet_at(kcp_client, ns)
            await create_policy(kcp_client, ns, soak="3s", deadline="30s")
            async with run_history(kcp_client, ns) as history:
                await set_channel(kcp_client, ns, {"regular": NEW})
                soaking = await eventually(
                    lambda: run_in_phase(kcp_client, ns, name, "Soaking"),
                    "the canary wave soaking",
                    within=40,
                )
                lead = await leader(kcp_client, ns)
                holder = next(r for r in REPLICAS if r != lead)
                survivor = next(r for r in REPLICAS if r not in (lead, holder))
                for replica in (lead, holder):
                    fleet.processes[replica].signal(signal.SIGTERM)

                async def all_moved() -> bool:
                    found = await holders(kcp_client, ns)
                    return set(found) == set(range(SHARDS)) and set(found.values()) == {survivor}

                await eventually(all_moved, f"every shard held by {survivor}", within=60, interval=0.2)

                async def leading() -> bool:
                    return await leader(kcp_client, ns) == survivor

                await eventually(leading, f"{survivor} leading", within=60, interval=0.2)
                await eventually(
                    lambda: run_in_phase(kcp_client, ns, name, "Completed"), "the run Completed", within=60
                )
                await eventually(
                    lambda: _counted_whole_fleet(kcp_client, ns, name),
                    "the run's counts covering every Kyma",
                    within=30,
                )
            await _nothing_lost_nothing_repeated(
                kcp_client, ns, name, history, soaking["status"]["soakStartedAt"], sim.spec_writes
            )
    finally:
        for process in fleet.processes.values():
            await process.stop()  # SIGKILL: how fast a replica shuts down is not what this test is about


async def test_a_change_missed_while_no_operator_ran_starts_its_run(
    kcp_client: KubeClient, kcp_namespace: str
) -> None:
    """§12: the channel moved while no operator ran; on start the starter compares the channel with
    the newest run (none) and the version most Kymas have installed, and starts the missing run."""
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    config = operator_config(ns, **rollout_config(ns))
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}) as sim:
        async with running_operator(kcp_client, config):
            await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak="1s", deadline="20s")
        await set_channel(kcp_client, ns, {"regular": NEW})  # nobody watching
        async with run_history(kcp_client, ns) as history, running_operator(kcp_client, config) as running:
            run = await eventually(
                lambda: run_in_phase(kcp_client, ns, name, "Completed"), "the missed run Completed", within=60
            )
            assert (run["spec"]["fromVersion"], run["spec"]["toVersion"]) == (OLD, NEW)
            assert running.operator.rollouts is not None
            assert running.operator.rollouts.starter.created == [name]
        assert sorted(sim.spec_writes.values()) == [2] * KYMA_COUNT, sim.spec_writes
        # gated from the first reconcile on: no Kyma upgraded before the frontier reached its wave
        parsed = ModuleRollout.from_object(run)
        kymas = {k["metadata"]["name"]: k for k in await kymas_of(kcp_client, ns)}
        moves = frontier_moves(history)
        for change in sim.upgraded():
            wave = waves.placement_of_object(parsed, kymas[change.kyma]).wave
            assert change.resource_version > moves[wave], (change, moves)
