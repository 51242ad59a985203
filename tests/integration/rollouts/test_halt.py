"""A bad version halts in the canary wave; with ``onFailure: Revert`` the canaries go back
(docs/rollouts.md §15).

The fleet of ``fleet.py`` at 1.0.0; the channel moves to a 1.1.0 whose module never becomes
available: either its Manifest reports ``Error`` (the Deployment is not available) or it never
reports Ready and the wave's progress deadline passes. Only the canary Kymas may receive 1.1.0;
every other Kyma keeps 1.0.0 without a single Manifest write.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kyma_operator.api import names
from kyma_operator.api.resources import MODULE_TEMPLATES
from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.harness import RunningOperator
from tests.integration.kyma_operator.modules_env import MODULE
from tests.integration.rollouts.fleet import (
    CANARIES,
    KYMA_COUNT,
    NEW,
    OLD,
    create_policy,
    events_of,
    fleet_at,
    manifests_of,
    publish,
    rollout_name,
    run_in_phase,
    runtimes,
    set_channel,
)
from tests.polling import eventually


@pytest.mark.parametrize(
    ("bad", "deadline", "why"), [("Error", "20s", "failed"), (None, "3s", "progressDeadline")]
)
async def test_unavailable_deployment_halts_in_canary(
    kcp_client: KubeClient,
    kcp_namespace: str,
    operator: RunningOperator,
    bad: str | None,
    deadline: str,
    why: str,
) -> None:
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: bad}) as sim:
        await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak="1s", deadline=deadline)
        await set_channel(kcp_client, ns, {"regular": NEW})
        run = await eventually(
            lambda: run_in_phase(kcp_client, ns, name, "Halted"), "the run Halted", within=40
        )
        status = run["status"]
        assert status["frontier"]["wave"] == 0
        assert "canary" in status["haltReason"] and why in status["haltReason"], status["haltReason"]
        # the first failure beyond the budget (0) halts: the other canary may not have failed yet
        assert status["failedKymas"] and set(status["failedKymas"]) <= set(CANARIES), status["failedKymas"]

        manifests = await manifests_of(kcp_client, ns)
        upgraded = {k for k, m in manifests.items() if m["spec"]["version"] == NEW}
        assert upgraded and upgraded <= set(CANARIES), upgraded
        held = [k for k in manifests if k not in CANARIES]
        assert len(held) == KYMA_COUNT - len(CANARIES)
        assert all(sim.spec_writes[manifests[k]["metadata"]["name"]] == 1 for k in held), sim.spec_writes
        reasons = Counter(e["reason"] for e in await events_of(kcp_client, ns, name))
        assert reasons["RolloutHalted"] == 1, reasons
        assert reasons["WaveReleased"] == 1, reasons
        registry = operator.operator.manager.registry
        reason = "failure_budget" if bad == "Error" else "progress_deadline"
        halts = registry.get_sample_value(
            "kyma_operator_rollout_halts_total", {"module": MODULE, "reason": reason}
        )
        assert halts == 1.0
        if bad == "Error":  # from the first Error seen to the halt written
            latency = registry.get_sample_value("kyma_operator_rollout_halt_latency_seconds_count")
            assert latency == 1.0


async def test_revert_returns_canary_to_old_version(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Error"}) as sim:
        await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak="1s", deadline="20s", on_failure="Revert")
        await set_channel(kcp_client, ns, {"regular": NEW})
        run = await eventually(
            lambda: run_in_phase(kcp_client, ns, name, "Reverted"), "the run Reverted", within=40
        )
        assert run["status"]["revert"]["wave"] == 0

        manifests = await manifests_of(kcp_client, ns)
        assert {k: m["spec"]["version"] for k, m in manifests.items()} == {
            f"k{i}": OLD for i in range(KYMA_COUNT)
        }
        for kyma in CANARIES:
            manifest = manifests[kyma]
            assert manifest["metadata"]["annotations"][names.REVERTED_BY_ANNOTATION] == name
            assert manifest["status"]["state"] == "Ready"
        reverted = [c for c in sim.changes if c.version == OLD]
        assert sorted(c.kyma for c in reverted) == sorted(CANARIES)
        assert all(c.reverted_by == name for c in reverted)
        reasons = Counter(e["reason"] for e in await events_of(kcp_client, ns, name))
        assert reasons["RolloutRevertStarted"] == 1 and reasons["RolloutReverted"] == 1, reasons
        for kyma in CANARIES:
            kyma_reasons = Counter(e["reason"] for e in await events_of(kcp_client, ns, kyma))
            assert kyma_reasons["ModuleRevertedByRollout"] == 1, (kyma, kyma_reasons)


async def test_revert_without_the_old_template_halts_instead(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    """§8.5: ``onFailure: Revert`` needs ``fromVersion``'s ModuleTemplate; gone when the run
    starts, the run records ``RevertUnavailable`` and a breach halts it (nobody is downgraded)."""
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    async with runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Error"}):
        await fleet_at(kcp_client, ns)
        await create_policy(kcp_client, ns, soak="1s", deadline="20s", on_failure="Revert")
        await kcp_client.delete(MODULE_TEMPLATES, f"{MODULE}-{OLD}", ns)
        await set_channel(kcp_client, ns, {"regular": NEW})
        run = await eventually(
            lambda: run_in_phase(kcp_client, ns, name, "Halted"), "the run Halted", within=40
        )
        conditions = {c["type"]: c for c in run["status"]["conditions"]}
        assert conditions["RevertUnavailable"]["status"] == "True", conditions
        assert run["status"].get("revert") is None
        manifests = await manifests_of(kcp_client, ns)
        assert not [
            c for c in (await events_of(kcp_client, ns, name)) if c["reason"] == "RolloutRevertStarted"
        ]
        assert {m["spec"]["version"] for k, m in manifests.items() if k not in CANARIES} == {OLD}
