"""`kyma module rollout` steering a rollout the real operator runs (docs/rollouts.md §15: "pause /
resume / abort from the CLI").

Real: the KCP API server, the operator (Kyma controller + the leader's rollout controller and
starter, in this process, as ``tests/integration/rollouts``), the ``kyma`` CLI as its own process.
The runtimes are played by ``tests/integration/rollouts/fleet.Runtimes`` (Manifest statuses per
version). The test asserts what the operator does with the CLI's writes: a pause holds the
frontier (no wave released while paused, even past the soak), a resume completes the rollout
(``--watch`` returns 0 at Completed), a halted rollout exits 1 and is refused a plain resume, and
an abort ends it for good while the other Kymas keep the old version.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.resources import MODULE_ROLLOUT_POLICIES
from kyma_operator.runtime.kube import KubeClient
from tests.controlplane.cluster import APIServer
from tests.integration.cli.conftest import REPO
from tests.integration.kyma_operator.harness import operator_config, running_operator
from tests.integration.kyma_operator.modules_env import MODULE
from tests.integration.rollouts.conftest import rollout_config
from tests.integration.rollouts.fleet import (
    CANARIES,
    NEW,
    OLD,
    RING_LABEL,
    ShiftedWallClock,
    fleet_at,
    manifests_of,
    publish,
    reconciled_once_more,
    rollout_name,
    run_history,
    run_in_phase,
    run_or_none,
    runtimes,
    set_channel,
)
from tests.polling import eventually

CANARY_SOAK = 3.0


def policy(ns: str) -> dict[str, Any]:
    """Canary (soak 3 s), then 50 % and the rest (soak 1 s); each wave's progress deadline 20 s (the
    pause test holds the canaries' answer until its pause is in, so the pause has that long)."""
    deadline = "20s"
    return {
        "apiVersion": names.MODULE_ROLLOUT_POLICY.api_version,
        "kind": names.MODULE_ROLLOUT_POLICY.kind,
        "metadata": {"name": "gated", "namespace": ns},
        "spec": {
            "modules": [{"name": MODULE, "channels": ["regular"]}],
            "waves": [
                {
                    "name": "canary",
                    "selector": {"matchLabels": {RING_LABEL: "canary"}},
                    "minUpgraded": 1,
                    "progressDeadline": deadline,
                    "soakTime": f"{CANARY_SOAK:.0f}s",
                },
                {"name": "half", "upToPercent": 50, "progressDeadline": deadline, "soakTime": "1s"},
                {"name": "rest", "upToPercent": 100, "progressDeadline": deadline, "soakTime": "1s"},
            ],
        },
    }


async def start_cli(server: APIServer, ns: str, *args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'operator'}:{REPO}"}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kyma_operator.cli",
        "module",
        "rollout",
        *args,
        "--kubeconfig",
        str(server.kubeconfig_path),
        "-n",
        ns,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(process: asyncio.subprocess.Process, within: float = 90.0) -> tuple[int, str, str]:
    try:
        out, err = await asyncio.wait_for(process.communicate(), within)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def cli(server: APIServer, ns: str, *args: str) -> tuple[int, str, str]:
    return await finish(await start_cli(server, ns, *args))


async def test_pause_holds_the_frontier_and_resume_completes_the_rollout(
    kcp_crds: APIServer, kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    wall_clock = ShiftedWallClock()
    async with (
        running_operator(
            kcp_client, operator_config(ns, **rollout_config(ns)), wall_clock=wall_clock
        ) as running,
        # the canaries' new version reports nothing until the pause is in: the canary wave cannot
        # pass before the CLI (a process of its own, slow to start on a loaded machine) pauses it
        runtimes(kcp_client, ns, {OLD: "Ready", NEW: None}) as sim,
        run_history(kcp_client, ns) as history,
    ):
        await fleet_at(kcp_client, ns)
        await kcp_client.create(MODULE_ROLLOUT_POLICIES, policy(ns))
        await set_channel(kcp_client, ns, {"regular": NEW})
        await eventually(lambda: run_or_none(kcp_client, ns, name), "the run created", within=30)

        code, out, err = await cli(kcp_crds, ns, "pause", MODULE, "--reason", "hold on")
        assert code == 0, (out, err)
        paused = await eventually(lambda: run_in_phase(kcp_client, ns, name, "Paused"), "Paused", within=30)
        assert paused["status"]["frontier"]["wave"] == 0, paused["status"]
        sim.answer(NEW, "Ready")  # the canaries are Ready now: only the pause holds the next wave

        async def upgraded_ready() -> bool:
            states = [
                (m.get("status") or {}).get("state")
                for m in (await manifests_of(kcp_client, ns)).values()
                if m["spec"]["version"] == NEW
            ]
            return bool(states) and all(state == "Ready" for state in states)

        await eventually(upgraded_ready, "the upgraded canaries Ready")
        # past the canary's soak (the operator's clock moved, not waited for) a reconcile of the
        # run still leaves it paused in wave 0
        wall_clock.advance(datetime.timedelta(seconds=CANARY_SOAK + 1))
        await reconciled_once_more(kcp_client, running, ns, name)
        run = await run_in_phase(kcp_client, ns, name, "Paused")
        assert run is not None and run["status"]["frontier"]["wave"] == 0, run
        manifests = await manifests_of(kcp_client, ns)
        assert {k for k, m in manifests.items() if m["spec"]["version"] == NEW} <= set(CANARIES)

        code, out, err = await cli(kcp_crds, ns, "status", MODULE, "-o", "json")
        assert code == 0, (out, err)
        (doc,) = json.loads(out)
        assert doc["spec"]["state"] == "Paused" and doc["status"]["phase"] == "Paused"

        watch = await start_cli(kcp_crds, ns, "status", "--rollout", name, "--watch")
        assert watch.stdout is not None
        first = await asyncio.wait_for(watch.stdout.readline(), 60)
        assert f"rollout {name} Paused" in first.decode(), first
        code, out, err = await cli(kcp_crds, ns, "resume", MODULE)
        assert code == 0 and out.startswith(f"rollout {name} resumed"), (out, err)
        # resumed, the canary wave soaks: its end comes by the operator's clock, not a wait
        await eventually(lambda: run_in_phase(kcp_client, ns, name, "Soaking"), "soaking after the resume")
        wall_clock.advance(datetime.timedelta(seconds=CANARY_SOAK + 1))
        await reconciled_once_more(kcp_client, running, ns, name)
        code, out, err = await finish(watch)
        assert code == 0, (out, err)
        assert out.splitlines()[-1].split()[3] == "Completed", out

        manifests = await manifests_of(kcp_client, ns)
        assert all(m["spec"]["version"] == NEW for m in manifests.values())
        # no wave after the canary was released before the resume's write
        paused_rv = int(paused["metadata"]["resourceVersion"])
        resumed_rv = next(
            int(obj["metadata"]["resourceVersion"])
            for obj in history
            if obj["spec"]["state"] == "Running" and int(obj["metadata"]["resourceVersion"]) > paused_rv
        )
        early = [
            obj["status"]["frontier"]
            for obj in history
            if int(obj["metadata"]["resourceVersion"]) < resumed_rv
            and (obj.get("status") or {}).get("frontier")
        ]
        assert all(f["wave"] == 0 for f in early), early


async def test_a_halted_rollout_is_refused_a_plain_resume_and_aborted(
    kcp_crds: APIServer, kcp_client: KubeClient, kcp_namespace: str
) -> None:
    ns, name = kcp_namespace, rollout_name()
    await publish(kcp_client, ns, {"regular": OLD})
    async with (
        running_operator(kcp_client, operator_config(ns, **rollout_config(ns))),
        runtimes(kcp_client, ns, {OLD: "Ready", NEW: "Error"}),
    ):
        await fleet_at(kcp_client, ns)
        await kcp_client.create(MODULE_ROLLOUT_POLICIES, policy(ns))
        await set_channel(kcp_client, ns, {"regular": NEW})
        await eventually(lambda: run_in_phase(kcp_client, ns, name, "Halted"), "Halted", within=40)

        code, out, err = await cli(kcp_crds, ns, "status", MODULE)
        assert code == 1, (out, err)
        (line,) = err.strip().splitlines()
        assert line.startswith(f"rollout {name} halted in wave canary: ") and "failed > maxFailures 0" in line

        code, out, err = await cli(kcp_crds, ns, "resume", MODULE)
        assert code == 1 and err.strip().splitlines()[0] == line, (out, err)
        assert "--ignore-failed" in err.strip().splitlines()[1]

        code, out, err = await cli(kcp_crds, ns, "abort", MODULE, "--reason", "bad release")
        assert code == 0, (out, err)
        aborted = await eventually(
            lambda: run_in_phase(kcp_client, ns, name, "Aborted"), "Aborted", within=30
        )
        assert aborted["metadata"]["annotations"][names.STATE_REASON_ANNOTATION] == "bad release"
        code, out, err = await cli(kcp_crds, ns, "status", MODULE)
        assert code == 0 and " Aborted " in out, (out, err)
        manifests = await manifests_of(kcp_client, ns)
        assert all(m["spec"]["version"] == OLD for k, m in manifests.items() if k not in CANARIES)
