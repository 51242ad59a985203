"""A Lease renewed like the leader's, from a process that does nothing else: the API server's share.

Why: when an operator's Lease renewal is late, the time went either to the API server (busy
serving the replicas' lists) or to the operator process (its event loop busy, or no CPU for it).
This probe renews a Lease of its own exactly as ``runtime/leader.py`` does (GET, then PUT with the
resourceVersion) every ``--period`` seconds from an otherwise idle process, and writes one line per
attempt: ``<unix time> <GET seconds> <PUT seconds> <ok|error>``. Slow attempts here mean the API
server (or the machine) was slow; fast ones while an operator's renewal was late mean the operator.

Run (``scale_bench`` starts it around every restart)::

    python -m benchmarks.lease_probe KUBECONFIG NAMESPACE OUT [--period 1.5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kyma_operator.runtime.errors import KubeError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.leases import lease_spec, micro_time
from kyma_operator.runtime.resources import LEASES

NAME = "lease-probe"


async def attempt(client: KubeClient, namespace: str) -> tuple[float, float]:
    """One renewal: (GET seconds, PUT seconds)."""
    started = time.monotonic()
    now = micro_time(datetime.now(UTC))
    try:
        lease = await client.get(LEASES, NAME, namespace)
    except NotFound:
        got = time.monotonic()
        body = {"metadata": {"name": NAME, "namespace": namespace}, "spec": lease_spec(NAME, 10, now, now, 0)}
        await client.create(LEASES, body)
        return got - started, time.monotonic() - got
    got = time.monotonic()
    body = {
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "resourceVersion": lease["metadata"]["resourceVersion"],
        },
        "spec": lease_spec(NAME, 10, now, now, 0),
    }
    await client.update(LEASES, body)
    return got - started, time.monotonic() - got


async def probe(kubeconfig: Path, namespace: str, out: Path, period: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with KubeClient.from_kubeconfig_file(kubeconfig, request_timeout=60.0, max_concurrency=2) as client:
        with out.open("a") as sink:
            while not stop.is_set():
                begun = time.time()
                try:
                    got, put = await attempt(client, namespace)
                    sink.write(f"{begun:.3f} {got:.3f} {put:.3f} ok\n")
                except KubeError as exc:
                    sink.write(f"{begun:.3f} 0 0 error:{exc.status}\n")
                sink.flush()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), period)


@dataclass(frozen=True)
class Summary:
    attempts: int
    slowest: float
    over_2s: int
    over_5s: int
    errors: int

    def text(self) -> str:
        return (
            f"{self.attempts} attempts, slowest GET+PUT {self.slowest:.2f} s, over 2 s: {self.over_2s}, "
            f"over 5 s: {self.over_5s}, errors: {self.errors}"
        )


def summarize(path: Path) -> Summary:
    """The probe's figures from its output file."""
    totals: list[float] = []
    errors = 0
    for line in path.read_text().splitlines() if path.exists() else []:
        _, got, put, outcome = line.split()
        if outcome != "ok":
            errors += 1
            continue
        totals.append(float(got) + float(put))
    return Summary(
        len(totals) + errors,
        max(totals, default=0.0),
        sum(1 for t in totals if t > 2.0),
        sum(1 for t in totals if t > 5.0),
        errors,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kubeconfig", type=Path)
    parser.add_argument("namespace")
    parser.add_argument("out", type=Path)
    parser.add_argument("--period", type=float, default=1.5, help="seconds between two renewals")
    args = parser.parse_args(argv)
    asyncio.run(probe(args.kubeconfig, args.namespace, args.out, args.period))


if __name__ == "__main__":
    main()
