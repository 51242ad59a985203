"""A good version rolls through its waves in order; without a policy nothing changes (docs/rollouts.md §15).

Ten single-cluster Kymas (two in the canary ring) on the module's ``regular`` channel at 1.0.0; the
channel moves to 1.1.0. With a three-wave policy (canary selector, 50 %, 100 %; soak 1 s) the run
must release wave after wave, each only after the previous one soaked, and end ``Completed`` with
every Kyma at 1.1.0 from exactly one Manifest spec write each. Order is asserted with
resourceVersions (one etcd: one sequence), never with durations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

from kyma_operator.api import names
from kyma_operator.api.modulerollout import MANDATORY_CHANNEL, ModuleRollout
from kyma_operator.api.resources import KYMAS, MODULE_ROLLOUTS
from kyma_operator.rollouts import waves
from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.harness import RunningOperator
from tests.integration.rollouts.fleet import (
    CANARIES,
    KYMA_COUNT,
    NEW,
    OLD,
    Runtimes,
    create_policy,
    events_of,
    fleet_at,
    frontier_moves,
    manifests_of,
    publish,
    rollout_name,
    run_history,
    run_in_phase,
    runtimes,
    set_channel,
    set_mandatory,
)
from tests.polling import eventually


async def _rolls_through_three_waves(
    kcp: KubeClient,
    ns: str,
    sim: Runtimes,
    name: str,
    move: Callable[[], Awaitable[None]],
    operator: RunningOperator,
) -> None:
    """``move`` the version; the run ``name`` must end Completed, each wave released only after
    the one before it soaked, each Kyma upgraded by one Manifest write after its wave's release,
    each transition's event recorded once."""
    async with run_history(kcp, ns) as history:
        await move()
        run_obj = await eventually(
            lambda: run_in_phase(kcp, ns, name, "Completed"), "the run Completed", within=60
        )
    run = ModuleRollout.from_object(run_obj)
    assert (run.spec.from_version, run.spec.to_version, run.spec.policy_ref) == (OLD, NEW, "gated")

    # every Kyma at the new version, from one spec write after its Manifest's creation
    manifests = await manifests_of(kcp, ns)
    assert {k: m["spec"]["version"] for k, m in manifests.items()} == {
        f"k{i}": NEW for i in range(KYMA_COUNT)
    }
    assert sorted(sim.spec_writes.values()) == [2] * KYMA_COUNT, sim.spec_writes
    assert sorted(c.kyma for c in sim.upgraded()) == sorted(manifests)
    assert all(m["metadata"]["labels"][names.ROLLOUT_LABEL] == name for m in manifests.values())

    # each Kyma was upgraded only after the frontier reached its wave (the previous one soaked)
    kymas = {k["metadata"]["name"]: k for k in (await kcp.list_all(KYMAS, ns)).items}
    wave_of = {kyma: waves.placement_of_object(run, obj).wave for kyma, obj in kymas.items()}
    assert {wave_of[c] for c in CANARIES} == {0}
    assert set(wave_of.values()) <= {0, 1, 2}
    moves = frontier_moves(history)
    for change in sim.upgraded():
        assert change.resource_version > moves[wave_of[change.kyma]], (change, moves)
    members = Counter(wave_of.values())
    assert [w.members for w in run.status.waves] == [members.get(i, 0) for i in range(3)]
    assert all(w.soaked_at is not None for w in run.status.waves)

    # one event per transition, none twice
    events = await events_of(kcp, ns, name)
    reasons = Counter(e["reason"] for e in events)
    assert reasons["RolloutStarted"] == 1 and reasons["RolloutCompleted"] == 1, reasons
    released = Counter(e["message"] for e in events if e["reason"] == "WaveReleased")
    assert len(released) == 3 and set(released.values()) == {1}, released

    # the §10.3 metrics: the phase gauge, one upgrade write per Kyma, three waves soaked
    registry = operator.operator.manager.registry
    labels = {"rollout": name, "phase": "Completed"}
    assert registry.get_sample_value("kyma_operator_rollout_phase", {**labels, **_run_labels(run)}) == 1.0
    writes = registry.get_sample_value(
        "kyma_operator_rollout_manifest_writes_total", {"module": run.spec.module, "kind": "upgrade"}
    )
    assert writes == KYMA_COUNT
    soaked = registry.get_sample_value(
        "kyma_operator_rollout_wave_duration_seconds_count", {"module": run.spec.module}
    )
    assert soaked == 3


def _run_labels(run: ModuleRollout) -> dict[str, str]:
    spec = run.spec
    return {
        "module": spec.module,
        "channel": spec.channel,
        "from_version": spec.from_version,
        "to_version": spec.to_version,
    }


async def test_good_version_reaches_every_runtime_in_three_waves(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    ns = kcp_namespace
    await publish(kcp_client, ns, {"regular": OLD})
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}) as sim:
        await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak="1s", deadline="20s")
        await _rolls_through_three_waves(
            kcp_client,
            ns,
            sim,
            rollout_name(),
            lambda: set_channel(kcp_client, ns, {"regular": NEW}),
            operator,
        )


async def test_mandatory_version_rolls_in_waves(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    """A mandatory module's version (the pseudo-channel ``mandatory``, a policy for module ``*``)
    reaches every Kyma through the same waves."""
    ns = kcp_namespace
    await publish(kcp_client, ns, {}, mandatory=OLD)
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}) as sim:
        await fleet_at(kcp_client, ns, modules=())
        await create_policy(
            kcp_client, ns, soak="1s", deadline="20s", module="*", channels=(MANDATORY_CHANNEL,)
        )
        await _rolls_through_three_waves(
            kcp_client,
            ns,
            sim,
            rollout_name(channel=MANDATORY_CHANNEL),
            lambda: set_mandatory(kcp_client, ns, NEW),
            operator,
        )


async def test_no_policy_no_run(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    """Without a policy the channel's version reaches every Kyma as today (spread over the
    rollout delay, 1 s here) and no run object exists."""
    ns = kcp_namespace
    await publish(kcp_client, ns, {"regular": OLD})
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Ready"}):
        await fleet_at(kcp_client, ns)
        await set_channel(kcp_client, ns, {"regular": NEW})

        async def all_new() -> bool:
            found = await manifests_of(kcp_client, ns)
            return all(m["spec"]["version"] == NEW for m in found.values())

        await eventually(all_new, "every Kyma at 1.1.0", within=30)
        assert (await kcp_client.list_all(MODULE_ROLLOUTS, ns)).items == []
        assert operator.operator.rollouts is not None
        assert operator.operator.rollouts.starter.created == []
