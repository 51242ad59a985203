"""Pause, resume and abort reach the leader through the run's ``spec.state`` (docs/rollouts.md §8.6).

The CLI writes ``spec.state`` (its own tests live with it); here the field is patched as the CLI
would, and the run must follow: paused, the frontier does not move (the next wave is released only
after the resume's write); aborted, the run is terminal and the Kymas outside the frontier keep
their version.
"""

from __future__ import annotations

import datetime

from kyma_operator.api.resources import MODULE_ROLLOUTS
from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.harness import RunningOperator, settled
from tests.integration.rollouts.fleet import (
    CANARIES,
    NEW,
    OLD,
    ShiftedWallClock,
    create_policy,
    events_of,
    fleet_at,
    frontier_moves,
    manifests_of,
    publish,
    reconciled_once_more,
    rollout_name,
    run_history,
    run_in_phase,
    runtimes,
    set_channel,
)
from tests.polling import eventually

SOAK = datetime.timedelta(seconds=2)


async def _set_state(kcp: KubeClient, ns: str, name: str, state: str) -> int:
    """Patch ``spec.state`` as the CLI does; the resourceVersion of that write."""
    updated = await kcp.patch(MODULE_ROLLOUTS, name, {"spec": {"state": state}}, ns)
    return int(updated["metadata"]["resourceVersion"])


async def test_pause_freezes_the_frontier_until_resume(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator, wall_clock: ShiftedWallClock
) -> None:
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}):
        await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak=f"{SOAK.seconds}s", deadline="20s")
        async with run_history(kcp_client, ns) as history:
            await set_channel(kcp_client, ns, {"regular": NEW})
            await eventually(lambda: run_in_phase(kcp_client, ns, name, "Soaking"), "the canary soaking")
            await _set_state(kcp_client, ns, name, "Paused")
            paused = await eventually(lambda: run_in_phase(kcp_client, ns, name, "Paused"), "the run Paused")
            assert paused["status"]["frontier"]["wave"] == 0
            # past the canary's soak end, a reconcile (woken by a label) still releases nothing
            soak_end = datetime.datetime.fromisoformat(paused["status"]["soakStartedAt"]) + SOAK
            wall_clock.advance(soak_end - utc_now() + datetime.timedelta(seconds=1))
            assert wall_clock() > soak_end
            await reconciled_once_more(kcp_client, operator, ns, name)
            still = await run_in_phase(kcp_client, ns, name, "Paused")
            assert still is not None and still["status"]["frontier"]["wave"] == 0
            resumed_at = await _set_state(kcp_client, ns, name, "Running")
            await eventually(
                lambda: run_in_phase(kcp_client, ns, name, "Completed"), "the run Completed", within=60
            )
        # the next wave was released only after the resume was written
        assert frontier_moves(history)[1] > resumed_at
        reasons = [e["reason"] for e in await events_of(kcp_client, ns, name)]
        assert reasons.count("RolloutPaused") == 1 and reasons.count("RolloutResumed") == 1, reasons


async def test_abort_keeps_everyone_outside_the_frontier(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}) as sim:
        await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak="1h", deadline="20s")
        await set_channel(kcp_client, ns, {"regular": NEW})
        await eventually(lambda: run_in_phase(kcp_client, ns, name, "Soaking"), "the canary soaking")
        await _set_state(kcp_client, ns, name, "Aborted")
        run = await eventually(lambda: run_in_phase(kcp_client, ns, name, "Aborted"), "the run Aborted")
        assert run["status"]["frontier"]["wave"] == 0
        manifests = await manifests_of(kcp_client, ns)
        await settled(operator, *manifests)
        manifests = await manifests_of(kcp_client, ns)
        assert {k for k, m in manifests.items() if m["spec"]["version"] == NEW} == set(CANARIES)
        held = [m["metadata"]["name"] for k, m in manifests.items() if k not in CANARIES]
        assert all(sim.spec_writes[n] == 1 for n in held), sim.spec_writes
        reasons = [e["reason"] for e in await events_of(kcp_client, ns, name)]
        assert reasons.count("RolloutAborted") == 1, reasons
