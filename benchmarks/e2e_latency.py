"""Measure runtime write -> Kyma reconcile start, through the whole local system.

Run: ``.venv/bin/python -m benchmarks.e2e_latency [--writes 200] [--burst-writes 40] [--both-watchers]``.

Everything real on loopback, brought up by ``localrun``: one etcd, KCP and one SKR
kube-apiserver, the operator (Kyma + Watcher controllers, listener) in this process, the agent as
its own process (``python -m skr_watcher``), called by the SKR API server through its admission
webhook. Each sample is one ``PATCH`` of the runtime Kyma's ``spec.channel`` (a new value every
time) and the clock starts right before that request is sent. Recorded per write:

* routed: the listener hands the request for the Kyma to the Kyma controller;
* start: the Kyma reconcile begins (the DESIGN target: p50 <= 15 ms, p99 <= 50 ms);
* read: a reconcile started that read the new spec (the agent reports in the admission call,
  before the API server stores the write, so the first reconcile can be early; the controller then
  re-reads after ``event_settle_delays``);
* the PATCH itself (it includes the API server's call to the agent's webhook).

Series:

* isolated writes, spaced beyond the Kyma intake's throttle window (0.5 s): the event path itself;
* a burst (writes every 0.1 s): the listener forwards the first event of a Kyma at once and holds
  later ones within the window for one trailing request, so most writes wait for the window;
* ``--both-watchers``: also the module-resources Watcher of ``manifests/kcp``, which matches the
  runtime Kyma too (two admission calls, two events per write).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.samples import Series, sample_set, save
from benchmarks.stats import percentile
from kyma_operator.api import names
from kyma_operator.runtime.request import Request
from localrun.kcp import KYMAS, SKR_CRD_PLURALS, SYNC_NAMESPACE
from localrun.system import LocalSystem, local_system
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.crds import apply_crds

MODULE_WATCHER_FILE = "watcher-module-resources.yaml"
_CHANNELS = itertools.count()


@dataclass
class Sample:
    written: float
    patched: float
    routed: float | None = None
    started: float | None = None
    read: float | None = None


def channel_name(index: int) -> str:
    letters = ""
    index += 26 * 26  # at least three letters (the CRD wants 3-32 of [a-z])
    while index:
        index, rest = divmod(index, 26)
        letters = chr(ord("a") + rest) + letters
    return letters


def summary(label: str, values: list[float], total: int) -> str:
    ms = [v * 1000 for v in values]
    if not ms:
        return f"| {label} | no samples of {total} |"
    return (
        f"| {label} | {len(ms)}/{total} | p50 {percentile(ms, 0.5):.1f} ms | "
        f"p90 {percentile(ms, 0.9):.1f} ms | p99 {percentile(ms, 0.99):.1f} ms | max {max(ms):.1f} ms | "
        f"mean {statistics.fmean(ms):.1f} ms |"
    )


async def follow(
    system: LocalSystem,
    request: Request,
    starts: list[tuple[float, tuple[str, ...]]],
    sample: Sample,
    channel: str,
) -> None:
    """Poll until a reconcile that read ``channel`` started (or 5 s passed)."""
    deadline = time.monotonic() + 5.0
    written = sample.written
    while time.monotonic() < deadline:
        if sample.routed is None:
            sample.routed = next((at for at, r in system.routed if at >= written and r == request), None)
        if sample.started is None:
            sample.started = next((at for at, _ in starts if at >= written), None)
        sample.read = next(
            (
                r.started
                for r in system.reports
                if r.request == request and r.started >= written and f"channel={channel}" in r.remote_spec
            ),
            None,
        )
        if sample.read is not None:
            return
        await asyncio.sleep(0.002)


async def measure(system: LocalSystem, writes: int, spacing: float, *, isolate: bool) -> list[Sample]:
    runtime = system.runtimes[0]
    request: Request = runtime.request
    starts: list[tuple[float, tuple[str, ...]]] = []
    reconciler = system.operator.kyma.reconciler

    def on_start(req: Request, triggers: tuple[str, ...]) -> None:
        if req == request:
            starts.append((time.monotonic(), triggers))

    reconciler.on_start.append(on_start)
    samples: list[Sample] = []
    try:
        for _ in range(writes):
            if isolate:
                await system.quiet(runtime)
            channel = channel_name(next(_CHANNELS))
            written = time.monotonic()
            await runtime.client.patch(
                KYMAS, names.DEFAULT_REMOTE_KYMA_NAME, {"spec": {"channel": channel}}, SYNC_NAMESPACE
            )
            sample = Sample(written=written, patched=time.monotonic())
            samples.append(sample)
            if isolate:
                await follow(system, request, starts, sample, channel)
            else:
                await asyncio.sleep(max(0.0, spacing - (time.monotonic() - written)))
        if not isolate:  # let the last trailing requests arrive, then attribute
            await asyncio.sleep(1.5)
            for sample in samples:
                sample.routed = next(
                    (at for at, r in system.routed if at >= sample.written and r == request), None
                )
                sample.started = next((at for at, _ in starts if at >= sample.written), None)
    finally:
        reconciler.on_start.remove(on_start)
    return samples


def report(title: str, samples: list[Sample]) -> None:
    total = len(samples)
    print(f"\n{title}")
    print("| what | samples | p50 | p90 | p99 | max | mean |")
    print("|---|---|---|---|---|---|---|")
    print(
        summary("write -> routed by the listener", [s.routed - s.written for s in samples if s.routed], total)
    )
    print(
        summary("write -> Kyma reconcile start", [s.started - s.written for s in samples if s.started], total)
    )
    print(
        summary(
            "write -> start of a reconcile that read the write",
            [s.read - s.written for s in samples if s.read],
            total,
        )
    )
    print(
        summary("the PATCH request alone (incl. admission)", [s.patched - s.written for s in samples], total)
    )
    early = sum(1 for s in samples if s.started is not None and s.read is not None and s.read > s.started)
    print(f"first reconcile was earlier than the stored write (re-read needed): {early}/{total}")


async def run(plane: ControlPlane, args: argparse.Namespace) -> None:
    skip = () if args.both_watchers else (MODULE_WATCHER_FILE,)

    def say(message: str) -> None:
        if args.verbose:
            print(message, flush=True)

    async with local_system(plane, ["skr-1"], say, verbose=args.verbose, skip_manifests=skip) as system:
        await system.wait_ready()
        await system.quiet(system.runtimes[0])
        # warm-up: connections, first-request costs
        await measure(system, 5, 0.0, isolate=True)
        isolated = await measure(system, args.writes, 0.0, isolate=True)
        report(f"isolated writes ({args.writes}, each after the Kyma intake's throttle window)", isolated)
        if args.samples is not None:
            starts = [s.started - s.written for s in isolated if s.started]
            series = [Series.of("runtime write -> Kyma reconcile start (isolated writes)", starts, 0.05)]
            print(f"samples written to {save(args.samples, sample_set('benchmarks.e2e_latency', series))}")
        if args.burst_writes:
            await system.quiet(system.runtimes[0])
            burst = await measure(system, args.burst_writes, 0.1, isolate=False)
            report(f"burst: {args.burst_writes} writes 0.1 s apart (one Kyma)", burst)
        rereads = system.operator.kyma.reconciler.settle_rereads
        print(f"\nre-reads after an event that overtook its write (whole run): {rereads}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--burst-writes", type=int, default=40)
    parser.add_argument(
        "--both-watchers", action="store_true", help="also apply the module-resources Watcher"
    )
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument(
        "--samples", type=Path, metavar="FILE", help="also write the raw latencies there (JSON for the plots)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    # The runtime is living: its agent Deployment becomes Ready through kwok (nothing patches status).
    with ControlPlane(["kcp", "skr-1"], living=["skr-1"]) as plane:
        apply_crds(plane["kcp"].kubeconfig_path)
        apply_crds(plane["skr-1"].kubeconfig_path, plurals=SKR_CRD_PLURALS)
        asyncio.run(run(plane, args))
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
