"""A user's channel switch during a rollout: served at once by default, held when the policy says so
(docs/rollouts.md §8.2, §15).

The fleet is on ``regular`` at 1.0.0 but for one canary on ``fast``; ``fast`` moves to 1.1.0 under
a policy for ``fast`` whose canary wave soaks for an hour, so the run stays in its canary wave.
Then one Kyma outside the canary ring switches to ``fast``.
"""

from __future__ import annotations

from typing import Any

from kyma_operator.api import names
from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.harness import RunningOperator, settled
from tests.integration.rollouts.fleet import (
    NEW,
    OLD,
    create_policy,
    fleet_at,
    manifests_of,
    publish,
    rollout_name,
    run_in_phase,
    runtimes,
    set_channel,
)
from tests.polling import eventually

SWITCHER = "k5"
CANARY = "k0"


async def on_fast(kcp: KubeClient, ns: str, kyma: str) -> dict[str, Any] | None:
    manifest = (await manifests_of(kcp, ns)).get(kyma)
    labels = (manifest or {}).get("metadata", {}).get("labels") or {}
    return manifest if labels.get(names.CHANNEL_LABEL) == "fast" else None


async def _switch_during_rollout(
    kcp: KubeClient, ns: str, operator: RunningOperator, *, hold: bool
) -> tuple[dict[str, Any], dict[str, int], dict[str, Any]]:
    name = rollout_name(channel="fast")
    await publish(kcp, ns, {"regular": OLD, "fast": OLD})
    async with runtimes(kcp, ns, {OLD: "Ready", NEW: "Ready"}) as sim:
        await fleet_at(kcp, ns)
        await kcp.patch(KYMAS, CANARY, {"spec": {"channel": "fast"}}, ns)
        await eventually(lambda: on_fast(kcp, ns, CANARY), f"{CANARY}'s Manifest on channel fast")
        await create_policy(kcp, ns, channels=("fast",), soak="1h", hold_channel_switches=hold)
        await set_channel(kcp, ns, {"regular": OLD, "fast": NEW})
        await eventually(
            lambda: run_in_phase(kcp, ns, name, "Soaking"), "the fast run soaking its canary wave"
        )

        await kcp.patch(KYMAS, SWITCHER, {"spec": {"channel": "fast"}}, ns)
        await eventually(lambda: on_fast(kcp, ns, SWITCHER), f"{SWITCHER}'s Manifest on channel fast")
        await settled(operator, SWITCHER)
        manifest = (await manifests_of(kcp, ns))[SWITCHER]
        run = await run_in_phase(kcp, ns, name, "Soaking")
        assert run is not None, "the run left its canary wave"
        return manifest, dict(sim.spec_writes), run


async def test_switch_not_held_by_default(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    manifest, writes, run = await _switch_during_rollout(kcp_client, kcp_namespace, operator, hold=False)
    assert manifest["spec"]["version"] == NEW  # the user asked for fast's version now

    async def switched_in() -> bool:
        found = await run_in_phase(kcp_client, kcp_namespace, run["metadata"]["name"], "Soaking")
        return bool(found and found["status"]["totals"].get("switchedIn") == 1)

    await eventually(switched_in, "the run counting the switched-in Kyma")
    manifests = await manifests_of(kcp_client, kcp_namespace)
    others = [m["metadata"]["name"] for kyma, m in manifests.items() if kyma not in (SWITCHER, CANARY)]
    assert all(writes[name] == 1 for name in others), writes


async def test_switch_held_when_policy_says_so(
    kcp_client: KubeClient, kcp_namespace: str, operator: RunningOperator
) -> None:
    manifest, _, _ = await _switch_during_rollout(kcp_client, kcp_namespace, operator, hold=True)
    assert manifest["spec"]["version"] == OLD  # held like any Kyma of fast's run outside its frontier
