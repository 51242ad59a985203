"""Shard hand-offs between three real operator processes: cold start, kill -9, restart, SIGTERM.

Run: ``.venv/bin/python -m benchmarks.shard_bench [--runs 3] [--kymas 60] [--lease 10 --renew 7
--retry 1.5] [--join-kymas 5000 --logs DIR]`` (``--runs 0 --event-runs 0 --join-kymas 5000``: only the
replica-join scenario, about 5 minutes on a loaded 2-core machine). Recorded in
``benchmarks/results/sharding.md``.

Per run: one KCP API server (started once), ``--kymas`` Kymas without access Secrets (reconciles
fail fast and are retried every 3 s), three ``python -m kyma_operator --sharding --shards 16``
processes with the given Lease timings (default: the shipped ones) and one shared reconcile trace.
Figures, from the outside (the shard Leases' holders):

* cold start: processes started -> 16 shards held, each by the replica the assignment gives it
  (``fleet.settled``: spread evenly and no longer moving);
* kill -9 (a non-leader): -> its shards held by the two others; and -> every Kyma of those shards
  has started a reconcile on its new holder;
* restart of the killed one: -> settled over three again;
* SIGTERM (graceful: drain + release): -> its shards held by the others;
* overlap: Kymas reconciled by two replicas at overlapping times over the whole run (target 0).

Events during a kill -9 hand-off (``--event-runs``, default 3; ``--runs 0`` runs only these): 24
Kymas with runtime ids and signing keys in KCP, failed reconciles retried only after 300 s (so a
reconcile in the trace is caused by an event or a shard move); the agents of every runtime whose
shard the leader holds send signed events to another replica's public listener (one every 0.25 s
each, each retried every 0.25 s on 503: ``tests/integration/sharding/agents.py``), the leader is
killed -9. Figures: events sent during the hand-off (from the kill to the takeover, or under way
at the kill), how many ended 2xx and reached a reconcile on the holder, the 503s/refusals the
agents retried, kill -> shards taken over, and kill -> the first accepted event of a moved shard.

A replica joining (``--join-kymas N``, e.g. 5000; ``--join-runs``): N single-cluster Kymas (label
``operator.kyma-project.io/sync=false``, no modules: no runtime is simulated at all, a reconcile
is the operator's own KCP work and ends Ready, next due after 30 min). Per variant (plain
``--sharding``, then with ``--shard-scoped-caches``): r0 and r1 start and reconcile every Kyma once
(the first variant also writes every shard label); then r2 is started and joins. From the shared
trace (``--reconcile-trace-file``: CLOCK_MONOTONIC, the same clock as this script's) and r2's log:
spawn -> joined the shard group (its log line, seen within the 100 ms poll), joined -> first shard
active (trace ``acquired``: its Lease written and its caches synced), joined -> first reconcile
(trace ``start kyma`` by r2), joined -> all its shards active, joined -> every Kyma of its shards
reconciled by it; and r2's Lease write -> shard active (its ``acquired shard`` log line to the trace
line: the per-shard cache sync with scoped caches). Then what the hand-over gave back: r0's and
r1's RSS (their ``process_resident_memory_bytes``) when r2 was spawned and ``--join-watch`` seconds
after r2 settled, and their heap trims (``kyma_operator_heap_trims_total``) in between, with the
time from r2 settled to each one's first trim (polled every 0.5 s; -1: none within the watch).
``--operator-tree DIR`` runs another checkout's operator (before/after figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from benchmarks.scale_bench import tree_env
from kyma_operator.api.names import DISABLE_LABEL_VALUE, SYNC_LABEL
from kyma_operator.api.resources import KYMAS
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES
from kyma_operator.runtime.shardmap import shard_of
from kyma_wire.names import RUNTIME_ID_LABEL
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.crds import apply_crds
from tests.integration.sharding.agents import Agents, create_runtimes, kill_while_sending
from tests.integration.sharding.fleet import (
    SHARDS,
    Fleet,
    Line,
    gauge,
    holders,
    leader,
    overlaps,
    read_trace,
    settled,
)

REPLICAS = ("r0", "r1", "r2")
_HOLDERS = ("r0", "r1")
"""The replicas that hand shards over to the joiner."""
_RSS = "process_resident_memory_bytes"
_TRIMS = "kyma_operator_heap_trims_total"


async def _until(probe: Callable[[], Awaitable[bool]], seconds: float) -> float:
    """Seconds until ``probe()`` is true (polled every 50 ms)."""
    started = time.monotonic()
    while not await probe():
        if time.monotonic() - started > seconds:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def one_run(
    client: KubeClient, kubeconfig: Path, namespace: str, kymas: int, timings: list[str]
) -> dict[str, float]:
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    shard_by_kyma = {}
    for i in range(kymas):
        await client.create(
            KYMAS,
            {
                "metadata": {
                    "name": f"kyma-{i}",
                    "namespace": namespace,
                    "labels": {RUNTIME_ID_LABEL: f"rt-{i}"},
                },
                "spec": {"channel": "regular"},
            },
        )
        shard_by_kyma[f"{namespace}/kyma-{i}"] = shard_of(f"rt-{i}", SHARDS)
    with tempfile.TemporaryDirectory() as scratch:
        fleet = Fleet(kubeconfig, namespace, Path(scratch) / "trace.log", *timings)

        async def spread(over: tuple[str, ...]) -> bool:
            return settled(await holders(client, namespace), over)

        figures: dict[str, float] = {}
        try:
            for replica in REPLICAS:
                await fleet.start(replica)
            figures["cold start"] = await _until(lambda: spread(REPLICAS), 120)
            lead = await leader(client, namespace)
            victim = next(r for r in REPLICAS if r != lead)
            rest = tuple(r for r in REPLICAS if r != victim)
            moved = {s for s, h in (await holders(client, namespace)).items() if h == victim}
            killed = time.monotonic_ns()
            await fleet.processes[victim].stop()
            figures["kill -9 takeover"] = await _until(lambda: spread(rest), 60)
            found = await holders(client, namespace)
            want = {k for k, s in shard_by_kyma.items() if s in moved}

            async def reconciled() -> bool:
                started = {
                    line.subject
                    for line in read_trace(fleet.trace)
                    if line.event == "start"
                    and line.at > killed
                    and line.replica == found[shard_by_kyma[line.subject]]
                }
                return want <= started

            figures["kill -9 every moved Kyma reconciled"] = figures["kill -9 takeover"] + await _until(
                reconciled, 60
            )
            await fleet.start(victim)
            figures["restart rebalanced"] = await _until(lambda: spread(REPLICAS), 120)
            fleet.processes[victim].signal(signal.SIGTERM)
            figures["SIGTERM hand-over"] = await _until(lambda: spread(rest), 60)
        finally:
            await fleet.stop()
        figures["overlapping reconciles"] = float(len(overlaps(read_trace(fleet.trace))))
        return figures


async def events_run(
    client: KubeClient, kubeconfig: Path, namespace: str, timings: list[str]
) -> dict[str, float]:
    """Agents keep sending events of the leader's shards to another replica; kill -9 the leader."""
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    runtimes, keys = await create_runtimes(client, namespace, 24, SHARDS)
    quiet = ("--failure-base-delay=300", "--failure-max-delay=300")
    with tempfile.TemporaryDirectory() as scratch:
        fleet = Fleet(kubeconfig, namespace, Path(scratch) / "trace.log", *timings, *quiet)
        try:
            for replica in REPLICAS:
                await fleet.start(replica)
            await _until(lambda: _spread(client, namespace, REPLICAS), 120)
            victim = await leader(client, namespace)
            found = await holders(client, namespace)
            mine = [rt for rt in runtimes if found[rt.shard] == victim]
            to = next(p.listener for r, p in fleet.processes.items() if r != victim)
            async with httpx.AsyncClient(timeout=5) as http:
                outcome = await kill_while_sending(
                    fleet, client, victim, mine, Agents(http, keys), to, within=60
                )
            with contextlib.suppress(TimeoutError):  # a reconcile may still be starting
                await _until(_async(lambda: not outcome.unreconciled(fleet.trace, victim)), 10)
        finally:
            await fleet.stop()
        during = outcome.exposed
        missing = {id(d) for d in outcome.unreconciled(fleet.trace, victim)}
        return {
            "runtimes of the killed replica's shards": float(len(mine)),
            "events sent during the hand-off (kill .. takeover)": float(len(during)),
            "... answered 2xx": float(sum(d.accepted for d in during)),
            "... reached a reconcile on the holder": float(
                sum(d.accepted and id(d) not in missing for d in during)
            ),
            "503 / refused answers the agents retried": float(sum(len(d.statuses) - 1 for d in during)),
            "kill -9 -> shards taken over (s)": (outcome.taken_over_ns - outcome.killed_ns) / 1e9,
            "kill -9 -> first accepted event of a moved shard (s)": outcome.first_accepted_after_kill_s(),
        }


JOIN_FLAGS = ("--manifest-controller-enabled=false", "--kyma-modules=true")
"""No Manifests in this fleet: the Manifest controller would only add its idle informers."""


class _TraceTail:
    """The shared trace read incrementally (complete lines only): polling must not cost the
    measured processes the CPU of re-parsing a growing file on a 2-core machine."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[Line] = []
        self._offset = 0

    def read(self) -> list[Line]:
        if self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offset += len(complete)
            for raw in complete.decode().splitlines():
                event, kind, subject, replica, at = raw.split(" ")
                self.lines.append(Line(event, kind, subject, replica, int(at)))
        return self.lines


async def _create_join_fleet(client: KubeClient, namespace: str, kymas: int) -> dict[str, int]:
    """``kymas`` single-cluster Kymas without modules -> their shard; created 48 at a time."""
    await client.create(NAMESPACES, {"metadata": {"name": namespace}})
    shard_by_kyma: dict[str, int] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(kymas):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            runtime = f"rt-{i:05d}"
            labels = {RUNTIME_ID_LABEL: runtime, SYNC_LABEL: DISABLE_LABEL_VALUE}
            body = {"metadata": {"name": f"kyma-{i:05d}", "namespace": namespace, "labels": labels}}
            await client.create(KYMAS, {**body, "spec": {"channel": "regular"}})
            shard_by_kyma[f"{namespace}/kyma-{i:05d}"] = shard_of(runtime, SHARDS)

    await asyncio.gather(*(worker() for _ in range(48)))
    return shard_by_kyma


async def join_run(
    client: KubeClient,
    kubeconfig: Path,
    namespace: str,
    shard_by_kyma: dict[str, int],
    timings: list[str],
    scoped: bool,
    logs: Path | None = None,
    watch: float = 25.0,
    env: dict[str, str] | None = None,
) -> dict[str, float]:
    """r0, r1 reconcile the fleet; r2 joins: what it takes until its shards' Kymas are reconciled,
    and what r0 and r1 give back of their memory within ``watch`` seconds after."""
    extra = (*timings, *JOIN_FLAGS, f"--shard-scoped-caches={str(scoped).lower()}")
    with tempfile.TemporaryDirectory() as scratch:
        fleet = Fleet(kubeconfig, namespace, Path(scratch) / "trace.log", *extra, env=env)
        try:
            started = time.monotonic_ns()
            for replica in ("r0", "r1"):
                await fleet.start(replica)

            tail = _TraceTail(fleet.trace)

            def every_kyma_started(replicas: tuple[str, ...], after: int) -> set[str]:
                return {
                    ln.subject
                    for ln in tail.read()
                    if ln.kind == "kyma" and ln.event == "start" and ln.at > after and ln.replica in replicas
                }

            await _until(
                _async(lambda: len(every_kyma_started(("r0", "r1"), started)) == len(shard_by_kyma)), 300
            )
            rss_at_spawn = {r: gauge(fleet.processes[r], _RSS) for r in _HOLDERS}
            trims_at_spawn = {r: gauge(fleet.processes[r], _TRIMS) for r in _HOLDERS}
            spawned = time.monotonic_ns()
            joiner = await fleet.start("r2")
            lease_written: dict[int, int] = {}
            joined = 0
            seen = 0
            deadline = time.monotonic() + 300
            while True:  # r2's log lines, timestamped when seen (100 ms poll)
                now = time.monotonic_ns()
                for line in joiner.output[seen:]:
                    if "r2: joined the shard group" in line and not joined:
                        joined = now
                    if "r2: acquired shard " in line:
                        lease_written.setdefault(int(line.rsplit("acquired shard ", 1)[1].split()[0]), now)
                seen = len(joiner.output)
                found = await holders(client, namespace)
                mine = {s for s, h in found.items() if h == "r2"}
                trace = [ln for ln in tail.read() if ln.replica == "r2"]
                active = {
                    int(ln.subject): ln.at for ln in trace if ln.event == "acquired" and ln.replica == "r2"
                }
                want = {k for k, s in shard_by_kyma.items() if s in mine}
                done = {ln.subject for ln in trace if ln.event == "start" and ln.replica == "r2"}
                if settled(found, ("r0", "r1", "r2")) and set(active) >= mine and want <= done:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"r2 not settled: holds {sorted(mine)}, active {sorted(active)}")
                await asyncio.sleep(0.1)
            starts = [ln for ln in trace if ln.event == "start" and ln.replica == "r2"]
            first: dict[str, int] = {}
            for ln in starts:
                first.setdefault(ln.subject, ln.at)
            sync = [active[s] - lease_written[s] for s in mine if s in lease_written]
            first_trim = await _first_trims(fleet, trims_at_spawn, watch)
            rss_after = {r: gauge(fleet.processes[r], _RSS) for r in _HOLDERS}
            trims = {r: gauge(fleet.processes[r], _TRIMS) - trims_at_spawn[r] for r in _HOLDERS}
        finally:
            await fleet.stop()
            if logs is not None:  # each process's log, for what a number or a timeout hides
                _write_logs(logs, f"{namespace}-{'scoped' if scoped else 'plain'}", fleet)
    return {
        "shards r2 holds": float(len(mine)),
        "Kymas of its shards": float(len(want)),
        "spawn -> joined the shard group (s)": (joined - spawned) / 1e9,
        "joined -> first shard active (s)": (min(active[s] for s in mine) - joined) / 1e9,
        "joined -> first reconcile (s)": (min(ln.at for ln in starts) - joined) / 1e9,
        "joined -> all its shards active (s)": (max(active[s] for s in mine) - joined) / 1e9,
        "joined -> every Kyma of its shards reconciled (s)": (max(first[k] for k in want) - joined) / 1e9,
        "Lease written -> shard active, max (s)": max(sync, default=0) / 1e9,
        **{f"{r}: RSS at r2's spawn (MB)": rss_at_spawn[r] / 1e6 for r in _HOLDERS},
        **{f"{r}: RSS {watch:g} s after r2 settled (MB)": rss_after[r] / 1e6 for r in _HOLDERS},
        **{f"{r}: heap trims since r2's spawn": trims[r] for r in _HOLDERS},
        **{f"{r}: r2 settled -> its first trim since (s)": first_trim[r] for r in _HOLDERS},
    }


async def _first_trims(fleet: Fleet, trims_at_spawn: dict[str, float], watch: float) -> dict[str, float]:
    """Seconds from now to each holder's first heap trim since r2's spawn (-1: none within
    ``watch``); returns after ``watch`` seconds, the window the RSS after is read at the end of."""
    started = time.monotonic()
    first = dict.fromkeys(_HOLDERS, -1.0)
    while (elapsed := time.monotonic() - started) < watch:
        for replica in _HOLDERS:
            if first[replica] < 0 and gauge(fleet.processes[replica], _TRIMS) > trims_at_spawn[replica]:
                first[replica] = elapsed
        await asyncio.sleep(0.5)
    return first


def _write_logs(directory: Path, prefix: str, fleet: Fleet) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for replica, process in fleet.processes.items():
        (directory / f"{prefix}-{replica}.log").write_text(process.text())


def _async(probe: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def wrapped() -> bool:
        return probe()

    return wrapped


async def _spread(client: KubeClient, namespace: str, over: tuple[str, ...]) -> bool:
    return settled(await holders(client, namespace), over)


def _table(title: str, results: list[dict[str, float]]) -> None:
    print(f"\n{title}\n| | p50 | max |\n|---|---|---|")
    for key in results[0]:
        values = [r[key] for r in results]
        unit = " s" if key.endswith("(s)") or key in _SECONDS else " MB" if key.endswith("(MB)") else ""
        p50, top = statistics.median(values), max(values)
        label = key.removesuffix(" (s)").removesuffix(" (MB)")
        print(f"| {label} | {p50:.1f}{unit} | {top:.1f}{unit} |")


_SECONDS = {
    "cold start",
    "kill -9 takeover",
    "kill -9 every moved Kyma reconciled",
    "restart rebalanced",
    "SIGTERM hand-over",
}


async def main_async(
    runs: int,
    event_runs: int,
    kymas: int,
    timings: list[str],
    join_kymas: int = 0,
    join_runs: int = 1,
    logs: Path | None = None,
    join_watch: float = 25.0,
    operator_env: dict[str, str] | None = None,
) -> None:
    with ControlPlane(["kcp"]) as plane:
        server = plane["kcp"]
        apply_crds(server.kubeconfig_path)
        kubeconfig = Path(server.kubeconfig_path)
        async with KubeClient.from_kubeconfig_file(kubeconfig) as client:
            results: list[dict[str, float]] = []
            for i in range(runs):
                figures = await one_run(client, kubeconfig, f"shard-bench-{i}", kymas, timings)
                print(f"run {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()), flush=True)
                results.append(figures)
            events: list[dict[str, float]] = []
            for i in range(event_runs):
                figures = await events_run(client, kubeconfig, f"shard-bench-events-{i}", timings)
                print(
                    f"events run {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                    flush=True,
                )
                events.append(figures)
            joins: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for i in range(join_runs if join_kymas else 0):
                namespace = f"shard-bench-join-{i}"
                created = time.monotonic()
                shard_by_kyma = await _create_join_fleet(client, namespace, join_kymas)
                print(f"join run {i + 1}: {join_kymas} Kymas created in {time.monotonic() - created:.0f} s")
                for scoped in (False, True):
                    figures = await join_run(
                        client,
                        kubeconfig,
                        namespace,
                        shard_by_kyma,
                        timings,
                        scoped,
                        logs,
                        join_watch,
                        operator_env,
                    )
                    print(
                        f"join run {i + 1}{' --shard-scoped-caches' if scoped else ''}: "
                        + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                        flush=True,
                    )
                    joins[scoped].append(figures)
    for scoped, found in joins.items():
        if found:
            flag = " --shard-scoped-caches" if scoped else ""
            _table(f"r2 joins r0, r1 on {join_kymas} Kymas (--sharding{flag}), {len(found)} runs", found)
    if results:
        _table(f"{kymas} Kymas, 16 shards, 3 replicas, timings {' '.join(timings)}, {runs} runs", results)
    if events:
        _table(f"events during a kill -9 hand-off, timings {' '.join(timings)}, {event_runs} runs", events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--event-runs", type=int, default=3, help="kill -9 runs with agents sending events")
    parser.add_argument("--kymas", type=int, default=60)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--renew", type=float, default=7.0)
    parser.add_argument("--retry", type=float, default=1.5)
    parser.add_argument(
        "--join-kymas",
        type=int,
        default=0,
        help="Kymas of the replica-join scenario (0: not run), each variant once per --join-runs",
    )
    parser.add_argument("--join-runs", type=int, default=1, help="runs of the replica-join scenario")
    parser.add_argument("--logs", type=Path, help="directory for the join scenario's operator logs")
    parser.add_argument(
        "--join-watch",
        type=float,
        default=25.0,
        help="seconds to watch r0's and r1's memory and heap trims after r2 settled (join scenario)",
    )
    parser.add_argument(
        "--operator-tree",
        type=Path,
        help="run another checkout's kyma_operator (its operator/ first on the path) instead of this one",
    )
    args = parser.parse_args()
    timings = [
        f"--leader-elect-lease-duration={args.lease}",
        f"--leader-elect-renew-deadline={args.renew}",
        f"--leader-elect-retry-period={args.retry}",
    ]
    asyncio.run(
        main_async(
            args.runs,
            args.event_runs,
            args.kymas,
            timings,
            args.join_kymas,
            args.join_runs,
            args.logs,
            args.join_watch,
            tree_env(args.operator_tree.resolve()) if args.operator_tree is not None else None,
        )
    )


if __name__ == "__main__":
    main()
