"""Failover of the operator's leadership on real processes: kill -9 and SIGSTOP, and the overlap.

Run: ``.venv/bin/python -m benchmarks.failover_bench [--runs 10] [--lease 10 --renew 7 --retry 1.5]``.

Per run: one etcd + KCP API server (started once), two ``python -m kyma_operator --leader-elect``
processes with the given Lease timings (default: the shipped ones), one Kyma whose reconciles
fail fast so the leader keeps working. The leader is killed (``-9``) or paused (SIGSTOP); the
figure is the time until the standby's ``/readyz`` turns 200 (it serves events and reconciles
from then on). For SIGSTOP the old leader is then resumed and watched until it exits: the overlap
is the number of reconciles it started and events it accepted after resuming (target 0).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import time
from pathlib import Path

from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES
from kyma_wire.names import RUNTIME_ID_LABEL
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.crds import apply_crds
from tests.integration.kyma_operator.operator_process import OperatorProcess

STARTED = "kyma_operator_reconcile_started_total"


async def _until(probe: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not probe():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.05)


async def one_run(kubeconfig: Path, namespace: str, mode: str, timings: list[str]) -> tuple[float, int]:
    flags = [*timings, "--failure-base-delay=0.2", "--failure-max-delay=0.5"]
    leader = await OperatorProcess.start(kubeconfig, namespace, *flags)
    standby: OperatorProcess | None = None
    try:
        await _until(lambda: leader.readyz() == 200, 60)
        standby = await OperatorProcess.start(kubeconfig, namespace, *flags)
        await _until(lambda: standby is not None and standby.readyz() == 503, 60)
        before = leader.metric(STARTED)
        leader.signal(signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        at = time.monotonic()
        await _until(lambda: standby is not None and standby.readyz() == 200, 60)
        failover = time.monotonic() - at
        overlap = 0
        if mode == "stop":
            leader.signal(signal.SIGCONT)
            while leader.process.returncode is None:
                if leader.event_status() not in (0, 503):
                    overlap += 1
                started = leader.metric(STARTED)
                if started is not None and before is not None and started > before:
                    overlap += int(started - before)
                    before = started
                await asyncio.sleep(0.05)
        return failover, overlap
    finally:
        for process in (leader, standby):
            if process is not None:
                process.signal(signal.SIGCONT)
                await process.stop()


async def main_async(runs: int, timings: list[str]) -> None:
    with ControlPlane(["kcp"]) as plane:
        server = plane["kcp"]
        apply_crds(server.kubeconfig_path)
        kubeconfig = Path(server.kubeconfig_path)
        async with KubeClient.from_kubeconfig_file(kubeconfig) as client:
            results: dict[str, list[tuple[float, int]]] = {"kill": [], "stop": []}
            for i in range(runs):
                for mode in ("kill", "stop"):
                    namespace = f"failover-{mode}-{i}"
                    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
                    await client.create(
                        KYMAS,
                        {
                            "metadata": {
                                "name": "k",
                                "namespace": namespace,
                                "labels": {RUNTIME_ID_LABEL: "r"},
                            },
                            "spec": {"channel": "regular"},
                        },
                    )
                    failover, overlap = await one_run(kubeconfig, namespace, mode, timings)
                    results[mode].append((failover, overlap))
                    print(f"run {i + 1} {mode}: failover {failover:.1f} s, overlap {overlap}", flush=True)
    for mode, label in (("kill", "kill -9"), ("stop", "SIGSTOP")):
        times = [f for f, _ in results[mode]]
        overlaps = sum(o for _, o in results[mode])
        print(
            f"{label}: failover p50 {statistics.median(times):.1f} s, max {max(times):.1f} s "
            f"over {len(times)} runs; overlap (reconciles started + events accepted after resume) {overlaps}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per mode (kill -9, SIGSTOP)")
    parser.add_argument("--lease", type=float, default=10.0, help="--leader-elect-lease-duration")
    parser.add_argument("--renew", type=float, default=7.0, help="--leader-elect-renew-deadline")
    parser.add_argument("--retry", type=float, default=1.5, help="--leader-elect-retry-period")
    args = parser.parse_args()
    timings = [
        f"--leader-elect-lease-duration={args.lease}",
        f"--leader-elect-renew-deadline={args.renew}",
        f"--leader-elect-retry-period={args.retry}",
    ]
    asyncio.run(main_async(args.runs, timings))


if __name__ == "__main__":
    main()
