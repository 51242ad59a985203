"""Leadership on real processes: a paused leader acts on nothing after a takeover and steps down;
kill -9 fails over within the Lease timings; a lost Lease ends the process with a clear line.

Two ``python -m kyma_operator --leader-elect`` processes on one Lease (short timings: 4 s lease,
3 s renew deadline, 0.5 s retry), one Kyma whose reconciles fail fast (no access Secret), so the
leader keeps reconciling it. Per process the tests read what an outsider sees: ``/readyz``, the
listener's answer to an event (503 = not serving, 401 = serving, it checks authentication after
"serving"), and the metrics ``kyma_operator_reconcile_started_total`` (reconciles started) and
``kyma_operator_reconcile_gated_total`` (held back by the fence).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import LEASES
from kyma_wire.names import RUNTIME_ID_LABEL
from tests.controlplane.cluster import APIServer
from tests.integration.kyma_operator.operator_process import OperatorProcess, _get
from tests.polling import eventually

FAST_RETRIES = ("--failure-base-delay=0.2", "--failure-max-delay=0.5")
SLOW_RETRIES = ("--failure-base-delay=2", "--failure-max-delay=2")
"""One reconcile every 2 s: a start between reading the counter and SIGSTOP (a few ms) is unlikely."""


def started_count(process: OperatorProcess) -> float | None:
    return process.metric("kyma_operator_reconcile_started_total")


def master_status(process: OperatorProcess) -> float | None:
    """``leader_election_master_status`` as a scrape reads it (None: metrics unreachable)."""
    status, text = _get(f"http://127.0.0.1:{process.metrics}/metrics")
    for line in text.splitlines() if status == 200 else ():
        if line.startswith("leader_election_master_status{"):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
async def kyma(kcp_client: KubeClient, kcp_namespace: str) -> AsyncIterator[str]:
    """A Kyma without access Secret: every reconcile fails fast and is retried (work to watch)."""
    await kcp_client.create(
        KYMAS,
        {
            "metadata": {
                "name": "lead-kyma",
                "namespace": kcp_namespace,
                "labels": {RUNTIME_ID_LABEL: "rt-l"},
            },
            "spec": {"channel": "regular"},
        },
    )
    yield "lead-kyma"


async def start_pair(
    kubeconfig: Path, namespace: str, retries: tuple[str, ...] = FAST_RETRIES
) -> tuple[OperatorProcess, OperatorProcess]:
    first = await OperatorProcess.start(kubeconfig, namespace, *retries)
    await eventually(lambda: first.readyz() == 200, what="first operator leads", within=60)
    second = await OperatorProcess.start(kubeconfig, namespace, *retries)
    await eventually(lambda: second.readyz() == 503, what="second operator runs as standby", within=60)
    return first, second


async def test_paused_leader_acts_on_nothing_after_the_takeover_and_steps_down(
    kcp_crds: APIServer, kcp_namespace: str, kyma: str
) -> None:
    leader, standby = await start_pair(Path(kcp_crds.kubeconfig_path), kcp_namespace, SLOW_RETRIES)
    try:
        await eventually(lambda: (started_count(leader) or 0) > 0, what="leader reconciles the Kyma")
        assert leader.event_status() == 401  # serving (the unsigned event is refused after that check)
        assert standby.event_status() in (0, 503) and (started_count(standby) or 0) == 0  # no listener

        before = started_count(leader)
        leader.signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        await eventually(lambda: standby.readyz() == 200, what="standby takes over", within=30)
        failover = time.monotonic() - paused_at
        await eventually(lambda: (started_count(standby) or 0) > 0, what="new leader reconciles")
        assert standby.event_status() == 401

        leader.signal(signal.SIGCONT)
        statuses: set[int] = set()
        started_after: set[float | None] = set()
        reported: set[float | None] = set()
        deadline = time.monotonic() + 30
        while leader.process.returncode is None and time.monotonic() < deadline:
            statuses.add(leader.event_status())
            started_after.add(started_count(leader))
            reported.add(master_status(leader))
            assert leader.readyz() != 200, "the old leader reports ready after the takeover"
            await asyncio.sleep(0.05)
        code = await leader.wait(10)
        # Zero overlap: after resuming it accepted no event and started no reconcile.
        assert statuses <= {503, 0}, statuses
        assert started_after - {None} <= {before}, (before, started_after)
        # fenced from the first scrape after resuming, not only once it steps down
        assert reported - {None} == {0.0}, reported
        assert code == 1, leader.text()
        assert "leader work paused" in leader.text()
        assert "Traceback" not in leader.text(), leader.text()  # a clean shutdown order
        assert "lost leadership" in leader.text() or "lost its lease" in leader.text()
        assert standby.readyz() == 200 and standby.event_status() == 401
        print(f"failover after SIGSTOP: {failover:.1f} s")
        assert failover < 15
    finally:
        for process in (leader, standby):
            process.signal(signal.SIGCONT)
            await process.stop()


async def test_kill_9_fails_over_within_the_lease_timings(
    kcp_client: KubeClient, kcp_crds: APIServer, kcp_namespace: str, kyma: str
) -> None:
    leader, standby = await start_pair(Path(kcp_crds.kubeconfig_path), kcp_namespace)
    try:
        leader.signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await eventually(lambda: standby.readyz() == 200, what="standby takes over", within=30)
        failover = time.monotonic() - killed_at
        await eventually(lambda: (started_count(standby) or 0) > 0, what="new leader reconciles")
        lease = await kcp_client.get(LEASES, "klm-leadership-test", kcp_namespace)
        assert lease["spec"]["leaseTransitions"] >= 1
        print(f"failover after kill -9: {failover:.1f} s")
        assert failover < 15
    finally:
        for process in (leader, standby):
            await process.stop()


async def test_a_lost_lease_ends_the_process_with_a_clear_line(
    kcp_client: KubeClient, kcp_crds: APIServer, kcp_namespace: str, kyma: str
) -> None:
    process = await OperatorProcess.start(Path(kcp_crds.kubeconfig_path), kcp_namespace, *FAST_RETRIES)
    try:
        await eventually(lambda: process.readyz() == 200, what="operator leads", within=60)
        # Another party takes the Lease (as a standby would after a network partition).
        lease = await kcp_client.get(LEASES, "klm-leadership-test", kcp_namespace)
        lease["spec"]["holderIdentity"] = "someone-else"
        lease["spec"]["leaseDurationSeconds"] = 3600
        await kcp_client.update(LEASES, lease)
        code = await process.wait(30)
        assert code == 1, process.text()
        assert "stopped:" in process.text() and "lost its lease" in process.text()
        assert "Traceback" not in process.text(), process.text()
    finally:
        await process.stop()
