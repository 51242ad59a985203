"""Scale: 5,000 Kymas in one operator process, and what each runtime costs the operator.

Run: ``.venv/bin/python -m benchmarks.scale_bench kymas [--kymas 5000 --modules 5 --replicas 1 3]
[--shard-scoped-caches]``
and ``.venv/bin/python -m benchmarks.scale_bench runtimes [--runtimes 10 20 40]``. Recorded in
``benchmarks/results/scale.md``.

``kymas``: one etcd + KCP API server; ``--modules`` ModuleTemplates and ModuleReleaseMetas, then
``--kymas`` Kymas (single-cluster: label ``operator.kyma-project.io/sync=false``, every module
enabled) and one Manifest per Kyma and module, written as the Kyma controller writes them (its own
``desired_manifest``/``apply_body``, server-side apply with its field manager, status Ready), all
created concurrently. Then ``python -m kyma_operator`` is started cold (a count N > 1 in
``--replicas``: N processes with ``--sharding --shards 16 --replica-id r<i>``, ``--shards`` to
change it; one process runs with ``--leader-elect=false``) with ``--watcher-enabled=false``
(single-cluster Kymas need no agent), the module half on and the Manifest controller off (it would
install 25,000 Manifests, the per-runtime half below measures runtime clients); the figures are
the process RSS (peak and settled), the time until every Kyma has been reconciled once (distinct
Kymas in the operator's per-reconcile log lines) and each process's CPU seconds until then (a full
resync: cold start, lists, one reconcile of every Kyma; ``--shard-scoped-caches`` adds that flag
to this checkout's sharded processes). The first start (first ``--replicas`` count)
converges (finalizers, status); then one restart per ``--replicas`` count, of operators whose fleet
is converged (what an upgrade or a failover does): the figures the targets are about. It also
weighs one cached Manifest as the API server sends it, as the informer keeps it (``lean_object``)
and as the leader's rollout view keeps it (``fleet_view.rollout_manifest``).
``--fleet-via etcd``: a few seed Kymas are created and converged for real, the rest cloned from them
straight into etcd (``etcd_fleet.py``: minutes instead of hours at 5 modules; no first start then).
``--runs 1 3scoped 5scoped 3plain``: one restart per configuration; ``--base``: each configuration
on an empty fleet first (the fixed RSS base); ``--resync-interval S``: the CPU of each replica's
periodic full resync (``resync_window.py``); ``--count-instructions DIR``: that resync also counted
in machine instructions under valgrind's callgrind (``instruction_count.py``: CPU-seconds of the same
work vary by up to 31 % between restarts on this VM, instructions by 0.2 %); ``--memprobe N``: where
each operator's memory goes.

``runtimes``: one etcd, a KCP and the largest ``--runtimes`` count of real runtime API servers
(sharing the etcd, each its own prefix). For each count N (and 0): N Kymas in a fresh namespace,
each with an access Secret (the runtime's admin kubeconfig) to its own runtime, and a cold operator
(``--watcher-enabled=false``: every reconcile reaches its runtime - CRDs, the runtime Kyma, the
catalog - then stops at the missing agent and retries with backoff, so every runtime client is in
use: the busy case). Once every Kyma was reconciled twice and things settled: operator RSS,
threads, open file descriptors, sockets, TCP connections to runtime API servers, open runtime
clients (metric). The per-runtime slope is a least-squares fit; the 5,000-runtime figure is
base + slope x 5,000, an extrapolation.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.etcd_fleet import GROUP, Cloner, Etcd, Seed
from benchmarks.instruction_count import (
    CallgrindMissing,
    CountedResync,
    CountLedger,
    callgrind_prefix,
    count_resync,
    require_callgrind,
)
from benchmarks.lease_probe import summarize
from benchmarks.resync_window import (
    TraceReader,
    cpu_between,
    idle_rate,
    in_reconciles,
    replica_windows,
    resync_window,
)
from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.config import check_lease_timings
from kyma_operator.controllers.kyma.manifestbuild import desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.controllers.kyma.modulesync import FIELD_MANAGER, apply_body
from kyma_operator.rollouts.fleet_view import rollout_manifest
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.informer import lean_object
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES, SECRETS
from kyma_operator.runtime.shardmap import SHARD_LABEL
from tests.controlplane.binaries import REPO_ROOT
from tests.controlplane.cluster import APIServer, ControlPlane
from tests.controlplane.crds import apply_crds
from tests.controlplane.sockets import established, open_fds, socket_count, thread_count
from tests.integration.kyma_operator.modules_env import release_meta, template
from tests.integration.kyma_operator.operator_process import OperatorProcess

T = TypeVar("T")
RECONCILED = re.compile(r"reconcile Kyma (\S+) \[[^\]]*\]: (\w+)")
CHANNEL = "regular"
VERSION = "1.0.0"
SKR_CRD_PLURALS = ("kymas", "moduletemplates", "modulereleasemetas")


def _status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (peak) in bytes."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


async def _sample_peaks(pids: dict[str, int], peaks: dict[str, int], every: float = 0.5) -> None:
    """Keep the highest RSS of each process in ``peaks`` until cancelled (VmHWM would be the peak
    since the process started, e.g. the API server's while it took in the fleet)."""
    while True:
        for name, pid in pids.items():
            with contextlib.suppress(OSError):
                peaks[name] = max(peaks[name], _status(pid)["VmRSS"])
        await asyncio.sleep(every)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the process's main thread alone (``/proc/<pid>/task/<pid>/stat``):
    the rest of the process's CPU is its other threads' (the Lease thread, executors)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _mb(value: float) -> str:
    return f"{value / 1e6:.0f}"


async def _bounded(items: Sequence[T], call: Callable[[T], Awaitable[Any]], concurrency: int) -> None:
    queue: asyncio.Queue[T] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)

    async def worker() -> None:
        while not queue.empty():
            await call(queue.get_nowait())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


# -- the fleet in KCP -------------------------------------------------------------------------------


@dataclass
class Fleet:
    namespace: str
    kymas: int
    modules: int
    created_in: float = 0.0
    manifests: int = 0
    shards: int = 16
    """The shard count the fleet is labelled for (``--shards``)."""


MODULE_NAMES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


def _module(i: int) -> tuple[str, str]:
    name = f"module-{MODULE_NAMES[i]}"  # module names are letters only (CRD pattern)
    return name, f"kyma-project.io/module/{name}"


async def create_fleet(kcp: KubeClient, fleet: Fleet, concurrency: int = 48) -> None:
    """Templates, release metas, Kymas and their Manifests (as the Kyma controller writes them)."""
    ns = fleet.namespace
    start = time.monotonic()
    await kcp.create(NAMESPACES, {"metadata": {"name": ns}})
    resolved_by_module: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for i in range(fleet.modules):
        module, component = _module(i)
        tpl = await kcp.create(MODULE_TEMPLATES, template(ns, VERSION, module=module, component=component))
        meta = await kcp.create(
            MODULE_RELEASE_METAS, release_meta(ns, {CHANNEL: VERSION}, module=module, component=component)
        )
        resolved_by_module[module] = (tpl, meta)
    modules = [{"name": m} for m in resolved_by_module]
    created: list[dict[str, Any]] = []

    async def create_kyma(index: int) -> None:
        name = f"kyma-{index:05d}"
        body = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {
                    names.SYNC_LABEL: names.DISABLE_LABEL_VALUE,
                    names.RUNTIME_ID_LABEL: f"rt-{index:05d}",
                },
            },
            "spec": {"channel": CHANNEL, "modules": modules},
        }
        created.append(await kcp.create(KYMAS, body))

    await _bounded(range(fleet.kymas), create_kyma, concurrency)
    resolutions = [
        Resolved(
            module, CHANNEL, VERSION, ModuleTemplate.from_object(tpl), ModuleReleaseMeta.from_object(meta)
        )
        for module, (tpl, meta) in resolved_by_module.items()
    ]
    jobs = [(Kyma.from_object(k), r) for k in created for r in resolutions]

    async def create_manifest(job: tuple[Kyma, Resolved]) -> None:
        kyma, resolved = job
        manifest = desired_manifest(kyma, resolved)
        await kcp.apply(MANIFESTS, apply_body(manifest), field_manager=FIELD_MANAGER)
        await kcp.patch_status(MANIFESTS, manifest.name, {"status": {"state": "Ready"}}, ns)

    await _bounded(jobs, create_manifest, concurrency)
    fleet.manifests = len(jobs)
    fleet.created_in = time.monotonic() - start


async def weigh_cached_manifests(
    kcp: KubeClient, namespace: str, sample: int = 2000
) -> tuple[float, float, float]:
    """Bytes per Manifest as sent (parsed JSON), as the shared informers cache it (``lean_object``)
    and as the leader's fleet view for rollouts caches it (``fleet_view.rollout_manifest``)."""
    page = await kcp.list(MANIFESTS, namespace, limit=sample)
    raw = [json.dumps(item).encode() for item in page.items]
    del page
    sizes = []
    for transform in (lambda o: o, lean_object, rollout_manifest):
        tracemalloc.start()
        kept = [transform(json.loads(doc)) for doc in raw]
        sizes.append(tracemalloc.get_traced_memory()[0] / len(kept))
        tracemalloc.stop()
        del kept
    return sizes[0], sizes[1], sizes[2]


# -- operator processes -----------------------------------------------------------------------------


@dataclass
class Watched:
    """One operator process and what is sampled from it."""

    process: OperatorProcess
    started: float
    peak_rss: int = 0
    ready_at: float | None = None
    reconciled: dict[str, str] = field(default_factory=dict)
    reconciles: int = 0
    cpu_at_reconciled: float | None = None
    """CPU seconds from the start until every Kyma of the fleet was reconciled once (a full resync)."""
    cpu_samples: list[tuple[float, float]] = field(default_factory=list)
    """(monotonic time, CPU seconds so far) at every poll: CPU spent between two moments."""
    main_thread_samples: list[tuple[float, float]] = field(default_factory=list)
    """The same for the main thread alone."""
    _parsed: int = 0

    def poll(self) -> None:
        try:
            now = time.monotonic()
            self.cpu_samples.append((now, _cpu_seconds(self.process.pid)))
            self.main_thread_samples.append((now, _thread_cpu_seconds(self.process.pid)))
            status = _status(self.process.pid)
        except OSError:  # exited: the caller sees the return code
            return
        self.peak_rss = max(self.peak_rss, status.get("VmHWM", 0), status.get("VmRSS", 0))
        if self.ready_at is None and self.process.readyz() == 200:
            self.ready_at = time.monotonic() - self.started
        lines = self.process.output
        for line in lines[self._parsed :]:
            match = RECONCILED.search(line)
            if match:
                self.reconciles += 1
                self.reconciled[match.group(1)] = match.group(2)
        self._parsed = len(lines)


async def start_operators(
    kubeconfig: Path,
    namespace: str,
    replicas: int,
    extra: Sequence[str],
    env: dict[str, str] | None = None,
    sharded_extra: Sequence[str] = (),
) -> list[Watched]:
    watched = []
    for i in range(replicas):
        flags = [*extra]
        if replicas > 1:
            flags += ["--sharding", "--shards=16", f"--replica-id=r{i}", *sharded_extra]
        else:  # a cold start, not a wait for the killed predecessor's Lease to expire
            flags += ["--leader-elect=false"]
        process = await OperatorProcess.start(kubeconfig, namespace, *flags, env_extra=env)
        watched.append(Watched(process, time.monotonic()))
    return watched


async def until_reconciled(
    watched: list[Watched], expected: int, limit: float, times: int = 1
) -> tuple[float, dict[str, int]]:
    """Seconds until ``expected`` distinct Kymas were reconciled (each ``times`` times in total)."""
    start = min(w.started for w in watched)
    deadline = time.monotonic() + limit
    while True:
        for w in watched:
            if w.process.process.returncode is not None:
                raise RuntimeError(f"operator exited: {w.process.text()[-3000:]}")
            w.poll()
        distinct = set().union(*(w.reconciled for w in watched))
        total = sum(w.reconciles for w in watched)
        if len(distinct) >= expected and total >= expected * times:
            for w in watched:
                w.cpu_at_reconciled = _cpu_seconds(w.process.pid)
            outcomes: dict[str, int] = {}
            for w in watched:
                for state in w.reconciled.values():
                    outcomes[state] = outcomes.get(state, 0) + 1
            return time.monotonic() - start, outcomes
        if time.monotonic() > deadline:
            seen = {key.rsplit("/", 1)[-1] for key in distinct}
            missing = [f"kyma-{i:05d}" for i in range(expected) if f"kyma-{i:05d}" not in seen]
            raise TimeoutError(
                f"{len(distinct)} of {expected} Kymas reconciled after {limit:.0f} s; "
                f"reconciles per replica {[w.reconciles for w in watched]}; never reconciled: {missing[:10]}"
            )
        await asyncio.sleep(0.25)


PROBE_LABEL = "benchmark.kyma-project.io/probe"
"""The label ``--event-probes`` writes (a label change is an event for the Kyma controller)."""


async def probe_events(
    kubeconfig: Path, namespace: str, watched: list[Watched], count: int, spacing: float, expected: int
) -> list[tuple[str, float]]:
    """During the start-up round, (Kyma, monotonic time of the write) of up to ``count`` label
    changes, each to a Kyma the round has already reconciled (so it is not still queued from the
    list), one every ``spacing`` s, until the round is over."""
    rng = random.Random(count)
    probed: list[tuple[str, float]] = []
    kcp = KubeClient.from_kubeconfig_file(kubeconfig)
    try:
        while len(probed) < count:
            done = set().union(*(w.reconciled for w in watched))
            if len(done) >= expected:
                break
            candidates = sorted(done - {key for key, _ in probed})
            if len(done) >= expected // 20 and candidates:
                key = rng.choice(candidates)
                written = time.monotonic()
                labels = {PROBE_LABEL: str(time.time_ns())}  # new in every restart of the same fleet
                await kcp.patch(KYMAS, key.rsplit("/", 1)[-1], {"metadata": {"labels": labels}}, namespace)
                probed.append((key, written))
            await asyncio.sleep(spacing)
    finally:
        await kcp.close()
    return probed


def report_probes(probed: list[tuple[str, float]], trace: TraceReader) -> str:
    """Write -> next reconcile start of each probe (from the reconcile trace)."""
    trace.read()
    waits = []
    for key, written in probed:
        starts = [at for at, subject, _ in trace.starts if subject == key and at >= written]
        if starts:
            waits.append(min(starts) - written)
    if not waits:
        return f"event probes: {len(probed)} written during the round, none reconciled since"
    waits.sort()
    return (
        f"event probes during the start-up round: {len(probed)} changes, {len(waits)} reconciled; "
        f"write -> reconcile start p50 {1000 * waits[len(waits) // 2]:.0f} ms, max {1000 * waits[-1]:.0f} ms "
        f"(all: {', '.join(f'{1000 * w:.0f}' for w in waits)} ms)"
    )


async def settle(watched: list[Watched], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for w in watched:
            w.poll()
        await asyncio.sleep(0.5)


def variants(args: argparse.Namespace) -> list[tuple[str, dict[str, str] | None]]:
    """(label, environment) of each operator code to measure: this checkout, and ``--operator-tree``
    (another checkout's ``kyma_operator`` first on the path; the other packages come from this
    checkout) for before/after figures from one run."""
    found: list[tuple[str, dict[str, str] | None]] = [("this checkout", None)]
    if args.operator_tree is not None:
        tree = args.operator_tree.resolve()
        found.append((f"tree {tree}", tree_env(tree)))
    return found


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that runs another checkout's ``kyma_operator`` (first on the path; the other
    packages come from this checkout)."""
    return {"PYTHONPATH": f"{tree / 'operator'}:{tree}:{REPO_ROOT}"}


# -- scenario: 5,000 Kymas -------------------------------------------------------------------------


KYMA_FLAGS = (
    "--watcher-enabled=false",
    "--manifest-controller-enabled=false",
    "--kyma-modules=true",
    "--log-level=INFO",
)


DEPLOYMENT_TIMINGS = (
    "--leader-elect-lease-duration=10",
    "--leader-elect-renew-deadline=7",
    "--leader-elect-retry-period=1.5",
)
"""The Deployment's Lease timings (the defaults) instead of the tests' short ones (4/3/0.5 s), with
which three busy replicas on a loaded 2-core machine can miss a renewal and exit."""


def lease_timings(text: str) -> tuple[float, float, float]:
    """``--lease-timings``: ``DURATION/RENEW/RETRY`` in seconds, as the operator will accept them."""
    try:
        duration, renew, retry = (float(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not DURATION/RENEW/RETRY in seconds") from None
    try:
        if not retry > 0:
            raise ValueError("the retry period must be positive")
        check_lease_timings(duration, renew, retry)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return duration, renew, retry


def lease_flags(args: argparse.Namespace) -> list[str]:
    """The operators' Lease timing flags: ``--lease-timings`` if given, else ``--deployment-timings``'s
    or none (the tests' short ones)."""
    if args.lease_timings is not None:
        duration, renew, retry = args.lease_timings
        return [
            f"--leader-elect-lease-duration={duration:g}",
            f"--leader-elect-renew-deadline={renew:g}",
            f"--leader-elect-retry-period={retry:g}",
        ]
    return list(DEPLOYMENT_TIMINGS) if args.deployment_timings else []


@dataclass(frozen=True)
class RunSpec:
    """One operator configuration to start: ``replicas`` processes, sharded (``--sharding``) or not,
    with ``--shard-scoped-caches`` or not. Written ``1`` (one process, no sharding), ``N`` (N > 1:
    sharded, scoped if ``--shard-scoped-caches``), ``Nscoped`` or ``Nplain``."""

    replicas: int
    sharded: bool
    scoped: bool
    shards: int = 16

    @classmethod
    def parse(cls, token: str, scoped_default: bool, shards: int = 16) -> RunSpec:
        match = re.fullmatch(r"(\d+)(scoped|plain)?", token)
        if not match or int(match.group(1)) < 1:
            raise argparse.ArgumentTypeError(f"{token!r}: expected N, Nscoped or Nplain (N >= 1)")
        replicas, kind = int(match.group(1)), match.group(2)
        if kind is None:
            return cls(replicas, replicas > 1, replicas > 1 and scoped_default, shards)
        return cls(replicas, True, kind == "scoped", shards)

    def label(self) -> str:
        if not self.sharded:
            return f"{self.replicas} replica"
        shards = f" --shards={self.shards}" if self.shards != 16 else ""
        return f"{self.replicas} x --sharding{shards}" + (" --shard-scoped-caches" if self.scoped else "")


def _run_specs(args: argparse.Namespace) -> list[RunSpec]:
    tokens = args.runs if args.runs else [str(n) for n in args.replicas]
    return [RunSpec.parse(token, args.shard_scoped_caches, args.shards) for token in tokens]


async def start_group(
    kubeconfig: Path,
    namespace: str,
    spec: RunSpec,
    flags: Sequence[str],
    env: dict[str, str] | None,
    flags_of: Callable[[int], Sequence[str]] = lambda i: (),
    prefix: Sequence[str] = (),
) -> list[Watched]:
    """Start ``spec``'s replicas with ``flags``, and ``flags_of(i)`` for replica i; ``prefix``: a
    command each runs under (``--count-instructions``: valgrind)."""
    watched = []
    for i in range(spec.replicas):
        own = [*flags, *flags_of(i)]
        if spec.sharded:
            own += ["--sharding", f"--shards={spec.shards}", f"--replica-id=r{i}"]
            own += [f"--shard-scoped-caches={str(spec.scoped).lower()}"]  # explicit: the default changed
        else:  # a cold start, not a wait for the killed predecessor's Lease to expire
            own += ["--leader-elect=false"]
        process = await OperatorProcess.start(kubeconfig, namespace, *own, env_extra=env, prefix=prefix)
        watched.append(Watched(process, time.monotonic()))
    return watched


async def _ready(watched: list[Watched], limit: float) -> None:
    deadline = time.monotonic() + limit
    while not all(w.ready_at is not None for w in watched):
        for w in watched:
            if w.process.process.returncode is not None:
                raise RuntimeError(f"operator exited: {w.process.text()[-3000:]}")
            w.poll()
        if time.monotonic() > deadline:
            raise TimeoutError("operators not ready")
        await asyncio.sleep(0.25)


async def count_fleet(kcp: KubeClient, namespace: str) -> tuple[int, int, int, int]:
    """(Kymas, Ready Kymas, Manifests, Ready Manifests) through the API server, each kind listed as
    a watch stream from its watch cache (``KubeClient.watch_list``), each object reduced to its
    state as it arrives.

    Not paginated: at 50,000 Kymas, while the API server was still taking in the fleet, a
    paginated count of 250,000 Manifests from etcd took longer than etcd's 5-minute compaction
    three times in a row (410 on its continue token) and the run ended there."""
    found: list[int] = []
    for res in (KYMAS, MANIFESTS):
        listed = await kcp.watch_list(res, namespace, transform=_state_only, timeout_seconds=1800)
        found += [len(listed.items), sum(1 for item in listed.items if item.get("state") == "Ready")]
    return found[0], found[1], found[2], found[3]


def _state_only(obj: dict[str, Any]) -> dict[str, Any]:
    return {"state": (obj.get("status") or {}).get("state")}


async def converge_seeds(kubeconfig: Path, kcp: KubeClient, fleet: Fleet, limit: float = 300) -> None:
    """A real operator (``--sharding --shard-scoped-caches``, holding all the fleet's shards) converges the
    seed Kymas: finalizer, status Ready, shard label on each Kyma and its Manifests. Returns once
    that is so and nothing of the fleet was written for 3 s."""
    spec = RunSpec(1, True, True, fleet.shards)
    (w,) = await start_group(kubeconfig, fleet.namespace, spec, KYMA_FLAGS, None)
    try:
        deadline = time.monotonic() + limit
        quiet_since: float | None = None
        last: list[tuple[str, str]] = []
        while True:
            if w.process.process.returncode is not None:
                raise RuntimeError(f"seed operator exited: {w.process.text()[-3000:]}")
            kymas = (await kcp.list(KYMAS, fleet.namespace)).items
            manifests = (await kcp.list(MANIFESTS, fleet.namespace)).items
            converged = (
                len(kymas) == fleet.kymas
                and all(
                    (k.get("status") or {}).get("state") == "Ready"
                    and SHARD_LABEL in k["metadata"].get("labels", {})
                    and names.KYMA_FINALIZER in k["metadata"].get("finalizers", [])
                    for k in kymas
                )
                and len(manifests) == fleet.kymas * fleet.modules
                and all(SHARD_LABEL in m["metadata"].get("labels", {}) for m in manifests)
            )
            versions = sorted(
                (o["metadata"]["name"], o["metadata"]["resourceVersion"]) for o in kymas + manifests
            )
            if converged and versions == last:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= 3.0:
                    return
            else:
                quiet_since = None
            last = versions
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"seed Kymas not converged within {limit:.0f} s: {w.process.text()[-3000:]}"
                )
            await asyncio.sleep(0.5)
    finally:
        await w.process.stop()


async def create_fleet_in_etcd(
    plane: ControlPlane, kcp: KubeClient, fleet: Fleet, seeds: int, served_within: float = 600
) -> None:
    """``seeds`` Kymas through the API server, converged by the operator, then every other Kyma and
    its Manifests cloned from the first seed straight into etcd (``benchmarks/etcd_fleet.py``)."""
    start = time.monotonic()
    seed_fleet = Fleet(fleet.namespace, seeds, fleet.modules, shards=fleet.shards)
    await create_fleet(kcp, seed_fleet)
    await converge_seeds(plane["kcp"].kubeconfig_path, kcp, seed_fleet)
    seeded = time.monotonic()
    etcd = Etcd(plane.etcd_url)
    try:
        prefix = "/kcp"
        stored = await etcd.objects(f"{prefix}/{GROUP}/")
        real = [Seed.read(stored, prefix, fleet.namespace, i) for i in range(seeds)]
        cloner = Cloner(real[0], prefix, fleet.namespace, fleet.shards)
        for other in real[1:]:
            cloner.verify(other)
        print(
            f"{seeds} seed Kymas created and converged through the API server in {seeded - start:.0f} s; "
            f"clones of seeds 1..{seeds - 1} equal their real stored objects (but uids)",
            flush=True,
        )
        put_start = time.monotonic()
        written = await etcd.put_all(cloner.fleet(range(seeds, fleet.kymas)))
        put_took = time.monotonic() - put_start
    finally:
        await etcd.close()
    count_start = time.monotonic()
    expected = (fleet.kymas, fleet.kymas, fleet.kymas * fleet.modules, fleet.kymas * fleet.modules)
    counted: object = None
    while True:  # the watch cache follows etcd's watch: a list right after the puts may be behind
        try:
            counted = await count_fleet(kcp, fleet.namespace)
        except KubeError as exc:
            # 504 "Too large resource version", 429, or the stream closed early (the watch cache
            # re-initialising): the watch cache is catching up with etcd
            counted = str(exc)
        if counted == expected:
            break
        if time.monotonic() - count_start > served_within:
            raise RuntimeError(
                f"the API server serves {counted} (Kymas, Ready, Manifests, Ready), not {expected}"
            )
        await asyncio.sleep(1.0)
    kymas, ready_kymas, manifests, ready_manifests = expected
    print(
        f"etcd: {written} objects put in {put_took:.1f} s ({written / put_took:.0f} objects/s); "
        f"the API server served all of them {time.monotonic() - put_start:.0f} s after the first put "
        f"(watch cache streams): {kymas} Kymas ({ready_kymas} Ready), "
        f"{manifests} Manifests ({ready_manifests} Ready)",
        flush=True,
    )
    fleet.manifests = manifests
    fleet.created_in = time.monotonic() - start


async def create_fleet_via_api(plane: ControlPlane, kcp: KubeClient, fleet: Fleet, concurrency: int) -> None:
    """``create_fleet`` with the CPU seconds each party spent on it: where the time goes."""
    pids = {"kube-apiserver": plane["kcp"].pid, "etcd": plane.etcd_pid}
    before = {name: _cpu_seconds(pid) for name, pid in pids.items() if pid is not None}
    own = os.times()
    await create_fleet(kcp, fleet, concurrency)
    spent = {name: _cpu_seconds(pid) - before[name] for name, pid in pids.items() if pid is not None}
    mine = os.times()
    spent["benchmark (client)"] = mine.user + mine.system - own.user - own.system
    requests = fleet.kymas + 2 * fleet.manifests
    print(
        f"created {fleet.kymas} Kymas and {fleet.manifests} Manifests through the API server in "
        f"{fleet.created_in:.0f} s ({requests / fleet.created_in:.0f} requests/s, {concurrency} at a time); "
        "CPU s: "
        + ", ".join(
            f"{name} {cpu:.0f} ({1000 * cpu / requests:.2f} ms/request)" for name, cpu in spent.items()
        ),
        flush=True,
    )


async def measure_run(
    args: argparse.Namespace,
    kubeconfig: Path,
    namespace: str,
    spec: RunSpec,
    label: str,
    env: dict[str, str] | None,
    expected: int,
    base: dict[int, int] | None,
    etcd_url: str,
    plane_pids: dict[str, int],
    ledger: CountLedger | None = None,
) -> None:
    """One restart of ``spec`` on the fleet: RSS, CPU to the first full round, and (with
    ``--resync-interval``) the CPU of the periodic full resync that follows (``ledger``: also counted
    in instructions, ``--count-instructions``)."""
    flags = [*KYMA_FLAGS, *lease_flags(args)]
    trace: TraceReader | None = None

    def resync_flags(replica: int) -> list[str]:
        if not args.resync_interval:
            return []
        interval = f"{resync_interval(args, replica):g}"
        return [f"--kyma-healthy-interval={interval}", f"--kyma-unhealthy-interval={interval}"]

    if args.resync_interval or args.event_probes:
        path = Path(tempfile.mkdtemp(prefix="scale-trace-")) / "trace"
        flags += [f"--reconcile-trace-file={path}"]
        trace = TraceReader(path)
    etcd = Etcd(etcd_url)
    revision = await etcd.revision()
    plane_cpu = {name: _cpu_seconds(pid) for name, pid in plane_pids.items()}
    probe_out = Path(tempfile.mkdtemp(prefix="scale-probe-")) / "probe"
    probe = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.lease_probe",
        str(kubeconfig),
        namespace,
        str(probe_out),
        cwd=REPO_ROOT,
    )
    watched: list[Watched] = []
    plane_peak = {name: _status(pid)["VmRSS"] for name, pid in plane_pids.items()}
    plane_start = dict(plane_peak)
    sampler = asyncio.create_task(_sample_peaks(plane_pids, plane_peak))
    try:
        prefix = callgrind_prefix(ledger.out_dir) if ledger is not None else []
        watched = await start_group(kubeconfig, namespace, spec, flags, env, resync_flags, prefix)
        prober = None
        if args.event_probes and trace is not None:
            prober = asyncio.create_task(
                probe_events(kubeconfig, namespace, watched, args.event_probes, args.probe_spacing, expected)
            )
        took, outcomes = await until_reconciled(watched, expected, args.timeout)
        start_up_done = time.monotonic()
        probed = await prober if prober is not None else []
        print(
            "  control plane CPU s until then: "
            + ", ".join(
                f"{name} {_cpu_seconds(pid) - plane_cpu[name]:.1f}" for name, pid in plane_pids.items()
            ),
            flush=True,
        )
        await settle(watched, args.settle)
        writes = await etcd.count(f"/kcp/{GROUP}/", min_mod_revision=revision + 1) - len(probed)
        print(
            f"{label}: every Kyma reconciled once after {took:.1f} s; outcomes {outcomes}; Kymas/Manifests "
            f"written by the operators since their start: {writes}"
        )
        if trace is not None and args.event_probes:  # read after the settle: late ones included
            print(f"  {report_probes(probed, trace)}", flush=True)
        for i, w in enumerate(watched):
            rss = _status(w.process.pid)["VmRSS"]
            ready = f"{w.ready_at:.1f} s" if w.ready_at is not None else "-"
            cpu = f"{w.cpu_at_reconciled:.1f}" if w.cpu_at_reconciled is not None else "-"
            over = ""
            if base is not None:
                over = f" (base {_mb(base[i])} MB: +{_mb(rss - base[i])} MB)"
            print(
                f"  replica {i}: ready after {ready}, peak RSS {_mb(w.peak_rss)} MB, settled RSS "
                f"{_mb(rss)} MB{over} ({args.settle:.0f} s later), threads {thread_count(w.process.pid)}, "
                f"reconciles {w.reconciles} of {len(w.reconciled)} distinct Kymas, "
                f"CPU {cpu} s until every Kyma was reconciled once{_trims(w.process)}",
                flush=True,
            )
        if args.memprobe:
            await memprobe(watched)
        if trace is not None and args.resync_interval:
            await measure_resync(args, watched, trace, expected, start_up_done, spec, ledger)
    finally:
        sampler.cancel()
        print(
            "  control plane RSS during the restart: "
            + ", ".join(
                f"{name} {_mb(plane_start[name])} -> peak {_mb(plane_peak[name])} MB" for name in plane_pids
            ),
            flush=True,
        )
        for w in watched:
            await w.process.stop()
        probe.terminate()
        await probe.wait()
        await etcd.close()
        print(f"  {lease_report(watched, probe_out)}", flush=True)
        if args.logs is not None:
            keep_logs(args.logs, label, watched)


STALL = re.compile(r"event loop stalled ([\d.]+) s .* used ([\d.]+) s CPU")


def lease_report(watched: list[Watched], probe_out: Path) -> str:
    """Per replica: fenced gaps of its shard Leases, whether it lost the leader Lease, its event
    loop's stalls (``runtime/loopwatch``); and the idle probe's renewals (``lease_probe``)."""
    parts = []
    for i, w in enumerate(watched):
        text = w.process.text()
        stalls = [(float(a), float(b)) for a, b in STALL.findall(text)]
        longest = max(stalls, default=(0.0, 0.0))
        parts.append(
            f"r{i}: fenced gaps {text.count('renewed again after a fenced gap')}, "
            f"leader Lease lost {text.count('lost leadership')}, shards lost {text.count(': lost shard ')}, "
            f"loop stalls > 0.5 s {len(stalls)} (longest {longest[0]:.2f} s, {longest[1]:.2f} s CPU of it)"
        )
    return "leases: " + "; ".join(parts) + f"; idle probe: {summarize(probe_out).text()}"


MEMPROBE = Path(__file__).parent / "memprobe"


def memprobe_env(env: dict[str, str] | None, frames: int, path: Path) -> dict[str, str]:
    """``env`` plus ``benchmarks/memprobe`` first on the path: tracemalloc on, SIGUSR2 dumps to ``path``."""
    found = dict(env or {})
    default = f"{REPO_ROOT}:{REPO_ROOT / 'operator'}"
    found["PYTHONPATH"] = f"{MEMPROBE}:{found.get('PYTHONPATH', default)}"
    found["PYTHONTRACEMALLOC"] = str(frames)
    found["KLM_MEMPROBE_FILE"] = str(path)
    return found


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def memprobe(watched: list[Watched], limit: float = 120) -> None:
    """SIGUSR2 to every replica; print each one's tracemalloc summary once written."""
    path = Path(os.environ["KLM_MEMPROBE_FILE"])
    for w in watched:
        size = len(_text(path))
        w.process.signal(signal.SIGUSR2)
        deadline = time.monotonic() + limit
        while len(text := _text(path)) <= size or not text.endswith("\n"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no tracemalloc summary from pid {w.process.pid}")
            await asyncio.sleep(0.5)
        print(text[size:], flush=True)


def keep_logs(directory: Path, label: str, watched: list[Watched]) -> None:
    """Each operator's output of run ``label`` as ``<directory>/<label>-r<i>.log``."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")
    runs = 1 + sum(1 for _ in directory.glob(f"{stem}*-r0.log"))  # a repeated configuration: -2, -3
    suffix = "" if runs == 1 else f"-{runs}"
    for i, w in enumerate(watched):
        (directory / f"{stem}{suffix}-r{i}.log").write_text(w.process.text())


def resync_interval(args: argparse.Namespace, replica: int) -> float:
    """Replica ``replica``'s ``--kyma-healthy-interval``: ``--resync-interval``, plus ``replica`` times
    ``--stagger-resyncs``."""
    return float(args.resync_interval + replica * args.stagger_resyncs)


async def _follow_trace(
    watched: list[Watched],
    trace: TraceReader,
    found: Callable[[], T | None],
    closed: Callable[[T], float],
    deadline: float,
    missed: str,
) -> T:
    """Poll the replicas and read the trace until ``found()`` gives a window that ``closed`` over
    half a second ago; ``TimeoutError(missed)`` after ``deadline``."""
    while True:
        for w in watched:
            if w.process.process.returncode is not None:
                raise RuntimeError(f"operator exited: {w.process.text()[-3000:]}")
            w.poll()
        trace.read()
        window = found()
        if window is not None and time.monotonic() > closed(window) + 0.5:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(missed)
        await asyncio.sleep(0.25)
    for w in watched:
        w.poll()
    return window


def trace_names(watched: list[Watched], trace: TraceReader) -> list[str]:
    """Each replica's name in the reconcile trace: ``r<i>`` when sharded (``--replica-id``), else the
    one name the single replica's lines carry."""
    if len(watched) > 1:
        return [f"r{i}" for i in range(len(watched))]
    trace.read()
    seen = sorted({who for _, _, who in trace.starts})
    if len(seen) != 1:
        raise RuntimeError(f"one replica, but the trace names {seen}")
    return seen


def start_counting(
    ledger: CountLedger | None,
    watched: list[Watched],
    trace: TraceReader,
    since: list[float],
    start_up_done: float,
    deadline: float,
) -> list[asyncio.Task[CountedResync]]:
    """With ``--count-instructions``: one task per replica that counts its resync (from ``since[i]``
    on) in instructions (``instruction_count.count_resync``)."""
    if ledger is None:
        return []
    names = trace_names(watched, trace)

    def alive(w: Watched) -> Callable[[], None]:
        def check() -> None:
            if w.process.process.returncode is not None:
                raise RuntimeError(f"operator exited: {w.process.text()[-3000:]}")

        return check

    return [
        asyncio.create_task(
            count_resync(
                w.process.pid, names[i], trace, since[i], start_up_done, ledger.out_dir, deadline, alive(w)
            )
        )
        for i, w in enumerate(watched)
    ]


@contextlib.asynccontextmanager
async def counting_resyncs(
    ledger: CountLedger | None, spec: RunSpec, tasks: list[asyncio.Task[CountedResync]]
) -> AsyncIterator[None]:
    """Around a resync's measurement: then print each replica's counted resync and its share of the
    one-replica count of this run; cancel the counting if the measurement fails."""
    try:
        yield
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    if ledger is None:
        return
    for i, task in enumerate(tasks):
        counted = await task
        share = ledger.record(spec.replicas == 1 and not spec.sharded, counted)
        print(f"  replica {i} counted (callgrind): {counted.describe()}{share}", flush=True)


async def measure_resync(
    args: argparse.Namespace,
    watched: list[Watched],
    trace: TraceReader,
    expected: int,
    start_up_done: float,
    spec: RunSpec,
    ledger: CountLedger | None = None,
) -> None:
    """The periodic full resync after the start-up round: each replica's CPU in it (one window, or
    each replica's own with ``--stagger-resyncs``), and with ``ledger`` its instructions."""
    staggered = bool(args.stagger_resyncs) and len(watched) > 1
    if staggered:
        since = [w.started + resync_interval(args, i) for i, w in enumerate(watched)]
    else:
        since = [min(w.started for w in watched) + args.resync_interval] * len(watched)
    if start_up_done > min(since):
        print("  resync: not measured, the start-up round took longer than --resync-interval", flush=True)
        return
    counting = start_counting(ledger, watched, trace, since, start_up_done, max(since) + args.timeout)
    async with counting_resyncs(ledger, spec, counting):
        if staggered:
            await timed_staggered_resyncs(args, watched, trace, start_up_done, since)
        else:
            await timed_resync(args, watched, trace, expected, start_up_done, since[0])


async def timed_resync(
    args: argparse.Namespace,
    watched: list[Watched],
    trace: TraceReader,
    expected: int,
    start_up_done: float,
    since: float,
) -> None:
    """The replicas' resyncs in one window, from the first reconcile at or after ``since``."""
    window = await _follow_trace(
        watched,
        trace,
        lambda: resync_window(trace, expected, since, start_up_done),
        lambda found: found.closed,
        since + args.timeout,
        "the periodic resync did not reach every Kyma",
    )
    print(
        f"  full resync (the --kyma-healthy-interval={args.resync_interval:g} requeue of every Kyma): window "
        f"{window.closed - window.opened:.1f} s, reconciles per replica {window.reconciles}, Kyma reconciles "
        f"between the start-up round and the resync: {window.before}",
        flush=True,
    )
    names = list(window.reconciles) if len(watched) == 1 else [f"r{i}" for i in range(len(watched))]
    for i, w in enumerate(watched):
        cpu = cpu_between(w.cpu_samples, window.opened, window.closed)
        idle = idle_rate(w.cpu_samples, start_up_done + args.settle, window.opened - 0.5)
        main = cpu_between(w.main_thread_samples, window.opened, window.closed)
        spent = _in_reconciles(trace, names[i], window.opened, window.closed)
        print(
            f"  replica {i}: resync CPU {cpu:.2f} s (main thread {main:.2f} s, other threads "
            f"{cpu - main:.2f} s{spent}); idle before it {idle:.3f} CPU s/s "
            f"(x window = {idle * (window.closed - window.opened):.2f} s)",
            flush=True,
        )


def _in_reconciles(trace: TraceReader, replica: str, opened: float, closed: float) -> str:
    """``; in its N reconciles X s (B % of the window), median Y ms`` from the trace's ``end`` lines
    (B about 95 %: back to back), or nothing (a trace of an operator whose ``end`` lines carry no
    CPU: ``--operator-tree`` of an older checkout)."""
    spent = in_reconciles(trace, replica, opened, closed)
    if spent is None:
        return ""
    busy = f" ({spent.busy:.0%} of the window)" if spent.busy is not None else ""
    median = spent.median * 1000
    return f"; in its {spent.reconciles} reconciles {spent.total:.2f} s{busy}, median {median:.3f} ms"


async def timed_staggered_resyncs(
    args: argparse.Namespace,
    watched: list[Watched],
    trace: TraceReader,
    start_up_done: float,
    since_of: list[float],
) -> None:
    """Each replica's own resync window, one after the other (``--stagger-resyncs``): replica i's
    from its first reconcile at or after ``since_of[i]``."""
    since = {f"r{i}": at for i, at in enumerate(since_of)}
    windows = await _follow_trace(
        watched,
        trace,
        lambda: replica_windows(trace, since, start_up_done),
        lambda found: max(window.closed for window in found.values()),
        max(since.values()) + args.timeout,
        "the staggered resyncs did not reach every Kyma",
    )
    spans = sorted((window.opened, window.closed) for window in windows.values())
    overlap = sum(max(0.0, a[1] - b[0]) for a, b in itertools.pairwise(spans))
    print(
        f"  full resync, staggered by {args.stagger_resyncs:g} s (replica i: --kyma-healthy-interval="
        f"{args.resync_interval:g} + i x {args.stagger_resyncs:g}); windows overlapping for {overlap:.1f} s",
        flush=True,
    )
    for i, w in enumerate(watched):
        window = windows[f"r{i}"]
        cpu = cpu_between(w.cpu_samples, window.opened, window.closed)
        main = cpu_between(w.main_thread_samples, window.opened, window.closed)
        idle = idle_rate(w.cpu_samples, start_up_done + args.settle, since[f"r{i}"] - 0.5)
        spent = _in_reconciles(trace, f"r{i}", window.opened, window.closed)
        print(
            f"  replica {i}: window {window.closed - window.opened:.1f} s, resync reconciles "
            f"{window.reconciles[f'r{i}']} (between the start-up round and it: {window.before}), resync CPU "
            f"{cpu:.2f} s (main thread {main:.2f} s{spent}); idle before it {idle:.3f} CPU s/s "
            f"(x window = {idle * (window.closed - window.opened):.2f} s)",
            flush=True,
        )


async def measure_base(
    args: argparse.Namespace, kubeconfig: Path, namespace: str, spec: RunSpec, env: dict[str, str] | None
) -> dict[int, int]:
    """Settled RSS of each replica of ``spec`` on an empty fleet (the catalog only), same flags."""
    flags = [*KYMA_FLAGS, *lease_flags(args)]
    watched = await start_group(kubeconfig, namespace, spec, flags, env)
    try:
        await _ready(watched, args.timeout)
        await settle(watched, args.settle)
        found = {i: _status(w.process.pid)["VmRSS"] for i, w in enumerate(watched)}
        print(
            f"base ({spec.label()}, empty fleet): settled RSS "
            + " / ".join(f"{_mb(rss)}" for rss in found.values())
            + " MB",
            flush=True,
        )
        return found
    finally:
        for w in watched:
            await w.process.stop()


async def kymas_scenario(args: argparse.Namespace) -> None:
    if args.control_plane_gogc:  # inherited by etcd and kube-apiserver (not by the operators)
        os.environ["GOGC"] = str(args.control_plane_gogc)
    with ControlPlane(["kcp"]) as plane:
        kcp_server = plane["kcp"]
        apply_crds(kcp_server.kubeconfig_path)
        fleet = Fleet("scale-kymas", args.kymas, args.modules, shards=args.shards)
        empty = Fleet("scale-empty", 0, args.modules)
        async with KubeClient.from_kubeconfig_file(
            kcp_server.kubeconfig_path, max_concurrency=args.create_concurrency
        ) as kcp:
            if args.fleet_via == "etcd":
                served_within = max(600.0, args.timeout)
                await create_fleet_in_etcd(plane, kcp, fleet, args.seeds, served_within=served_within)
            else:
                await create_fleet_via_api(plane, kcp, fleet, args.create_concurrency)
            if args.base:
                await create_fleet(kcp, empty)
            print(
                "control plane RSS: "
                + ", ".join(
                    f"{name} {_mb(_status(pid)['VmRSS'])} MB"
                    for name, pid in (("kube-apiserver", kcp_server.pid), ("etcd", plane.etcd_pid))
                    if pid is not None
                ),
                flush=True,
            )
            raw, lean, slim = await weigh_cached_manifests(kcp, fleet.namespace)
            print(
                f"one cached Manifest: {raw / 1000:.1f} KB as sent, {lean / 1000:.1f} KB lean, "
                f"{slim / 1000:.2f} KB in the leader's rollout view",
                flush=True,
            )
        if args.create_only:
            return
        codes = variants(args)
        specs = _run_specs(args)
        runs: list[tuple[str, RunSpec, tuple[str, dict[str, str] | None]]] = []
        if args.fleet_via == "api":  # the etcd fleet is converged already
            runs.append((f"first start, {specs[0].label()} (converges)", specs[0], codes[0]))
        for spec in specs:
            for code in codes:
                runs.append((f"restart, {spec.label()} (converged fleet), {code[0]}", spec, code))
        ledger = CountLedger(args.count_instructions) if args.count_instructions else None
        if args.memprobe:
            probe = Path(tempfile.mkdtemp(prefix="scale-memprobe-")) / "summary.txt"
            os.environ["KLM_MEMPROBE_FILE"] = str(probe)
        for run, spec, (_, env) in runs:
            if args.memprobe:
                env = memprobe_env(env, args.memprobe, Path(os.environ["KLM_MEMPROBE_FILE"]))
            base = None
            if args.base:
                base = await measure_base(args, kcp_server.kubeconfig_path, empty.namespace, spec, env)
            try:
                await measure_run(
                    args,
                    kcp_server.kubeconfig_path,
                    fleet.namespace,
                    spec,
                    run,
                    env,
                    fleet.kymas,
                    base,
                    plane.etcd_url,
                    {"kube-apiserver": kcp_server.pid or 0, "etcd": plane.etcd_pid or 0},
                    ledger,
                )
            except (
                RuntimeError,
                TimeoutError,
            ) as exc:  # an operator exited (e.g. lost its Lease): say so, go on
                print(f"{run}: FAILED: {str(exc)[:300]}", flush=True)


# -- scenario: per-runtime cost --------------------------------------------------------------------


@dataclass
class RuntimeSample:
    runtimes: int
    rss: int
    threads: int
    fds: int
    sockets: int
    runtime_connections: int
    open_clients: float | None
    reconcile_rounds_after: float


def _secret(ns: str, kyma: str, kubeconfig: bytes) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{kyma}-kubeconfig",
            "namespace": ns,
            "labels": {names.KYMA_NAME_LABEL: kyma},
        },
        "data": {"config": base64.b64encode(kubeconfig).decode()},
    }


def _trims(process: OperatorProcess) -> str:
    """One scrape of the operator's ``/metrics`` (its wall time, body and the replica's RSS just
    after), and the heap trims so far with the time they took (``runtime/heaptrim``; none on older
    code)."""
    started = time.monotonic()
    text = _scrape(process)
    took = time.monotonic() - started
    if text is None:
        return ", /metrics unreachable"
    rss = _mb(_status(process.pid)["VmRSS"])
    scrape = f", one scrape {took:.2f} s ({len(text) / 1e6:.1f} MB; RSS after {rss} MB)"
    trims = _metric(process, "kyma_operator_heap_trims_total", text)
    seconds = _metric(process, "kyma_operator_heap_trim_seconds_total", text)
    if trims is None or seconds is None:
        return scrape
    return f"{scrape}, heap trims {trims:.0f} ({seconds * 1e3:.1f} ms in all)"


def _scrape(process: OperatorProcess) -> str | None:
    """The operator's ``/metrics`` (None: unreachable). At 50,000 Kymas it is hundreds of MB: code
    before ``runtime/exposition`` took over 30 s of CPU to render it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics}/metrics", timeout=120) as response:
            return str(response.read().decode())
    except OSError:
        return None


def _metric(process: OperatorProcess, name: str, text: str | None = None) -> float | None:
    """An unlabelled gauge of the operator's ``/metrics`` (``text``: already scraped; None:
    unreachable or absent)."""
    text = text if text is not None else _scrape(process)
    for line in (text or "").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


async def one_runtime_count(
    servers: dict[str, APIServer],
    kcp: KubeClient,
    count: int,
    runtime_names: list[str],
    settle_s: float,
    code: tuple[str, dict[str, str] | None] = ("this checkout", None),
    variant: int = 0,
) -> RuntimeSample:
    ns = f"scale-rt-{count}-{variant}"
    await kcp.create(NAMESPACES, {"metadata": {"name": ns}})
    for i in range(count):
        kyma = f"kyma-rt-{i:03d}"
        await kcp.create(
            KYMAS,
            {
                "metadata": {
                    "name": kyma,
                    "namespace": ns,
                    "labels": {names.RUNTIME_ID_LABEL: f"rt-{i:03d}"},
                },
                "spec": {"channel": CHANNEL},
            },
        )
        await kcp.create(SECRETS, _secret(ns, kyma, servers[runtime_names[i]].kubeconfig))
    (w,) = await start_operators(
        servers["kcp"].kubeconfig_path,
        ns,
        1,
        ("--watcher-enabled=false", "--failure-max-delay=30", "--log-level=INFO"),
        code[1],
    )
    try:
        if count:
            await until_reconciled([w], count, 300, times=2)
        else:
            deadline = time.monotonic() + 300  # a loaded machine: 60 s were not always enough
            while w.process.readyz() != 200:
                if time.monotonic() > deadline:
                    raise TimeoutError("the operator did not become ready")
                await asyncio.sleep(0.25)
        await settle([w], settle_s)
        pid = w.process.pid
        ports = {servers[n].port for n in runtime_names[:count]}
        connections = [c for c in established(pid) if c.remote_port in ports]
        sample = RuntimeSample(
            runtimes=count,
            rss=_status(pid)["VmRSS"],
            threads=thread_count(pid),
            fds=open_fds(pid),
            sockets=socket_count(pid),
            runtime_connections=len(connections),
            open_clients=_metric(w.process, "kyma_operator_skr_clients"),
            reconcile_rounds_after=w.reconciles / max(count, 1),
        )
        print(
            f"[{code[0]}] {count:3d} runtimes: RSS {_mb(sample.rss)} MB, threads {sample.threads}, "
            f"fds {sample.fds}, "
            f"sockets {sample.sockets}, connections to runtimes {sample.runtime_connections}, "
            f"open runtime clients {sample.open_clients}, "
            f"reconciles/Kyma {sample.reconcile_rounds_after:.1f}",
            flush=True,
        )
        return sample
    finally:
        await w.process.stop()


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares: (intercept, slope)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return mean_y - slope * mean_x, slope


async def runtimes_scenario(args: argparse.Namespace) -> None:
    counts = sorted({0, *args.runtimes})
    runtime_names = [f"rt-{i:03d}" for i in range(max(counts))]
    # (no GOMEMLIMIT: 100 MiB brought an API server from ~270 to ~190 MiB, but the Go GC then ran
    # all the time, ~8 % of a core per idle API server: 2 cores for 26 of them)
    started = time.monotonic()
    servers: dict[str, APIServer] = {}
    with contextlib.ExitStack() as planes:
        # a few API servers at a time, each batch with its own etcd: 40 starting at once against one
        # etcd on 2 cores time out (kube-apiserver exits when its post-start hooks cannot finish)
        batches = [["kcp"]] + [
            runtime_names[i : i + args.batch] for i in range(0, len(runtime_names), args.batch)
        ]
        for batch in batches:
            plane = planes.enter_context(ControlPlane(batch, ready_timeout=300))
            servers.update(plane.servers)
            for name in batch:
                apply_crds(plane[name].kubeconfig_path, plurals=None if name == "kcp" else SKR_CRD_PLURALS)
        print(f"control plane: KCP + {len(runtime_names)} runtimes in {time.monotonic() - started:.0f} s")
        codes = variants(args)
        samples: dict[int, list[RuntimeSample]] = {i: [] for i in range(len(codes))}
        async with KubeClient.from_kubeconfig_file(servers["kcp"].kubeconfig_path) as kcp:
            for round_, count in enumerate(counts):
                order = list(range(len(codes)))
                if round_ % 2:  # alternate which code meets a count's runtimes first
                    order.reverse()
                for i in order:
                    samples[i].append(
                        await one_runtime_count(servers, kcp, count, runtime_names, args.settle, codes[i], i)
                    )
    for i, (label, _) in enumerate(codes):
        report_slopes(label, samples[i])


def report_slopes(label: str, samples: list[RuntimeSample]) -> None:
    print(
        f"\n[{label}] per runtime (least squares over",
        ", ".join(str(s.runtimes) for s in samples),
        "runtimes):",
    )
    measures: tuple[tuple[str, Callable[[RuntimeSample], float]], ...] = (
        ("RSS (MB)", lambda s: s.rss / 1e6),
        ("threads", lambda s: s.threads),
        ("open fds", lambda s: s.fds),
        ("sockets", lambda s: s.sockets),
        ("connections to runtimes", lambda s: s.runtime_connections),
    )
    for label, value in measures:
        base, slope = fit([(s.runtimes, float(value(s))) for s in samples])
        print(
            f"  {label}: base {base:.1f}, slope {slope:.3f} per runtime -> "
            f"5,000 runtimes (extrapolated): {base + slope * 5000:.0f}"
        )


def machine() -> str:
    cores = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    return f"{platform.system()} {platform.machine()}, {cores} cores, Python {platform.python_version()}"


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: asyncio.run cancels the scenario, whose ``finally`` blocks stop the
    operators and the control plane (a background job ignores SIGINT)."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale_bench", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="scenario", required=True)
    kymas = sub.add_parser("kymas", help="N Kymas and their Manifests, one operator cold start")
    kymas.add_argument("--kymas", type=int, default=5000)
    kymas.add_argument("--modules", type=int, default=5, help="modules per Kyma (= Manifests per Kyma)")
    kymas.add_argument(
        "--replicas",
        type=int,
        nargs="+",
        default=[1],
        help="operator processes (>1: --sharding); several: one restart each, in order",
    )
    kymas.add_argument(
        "--shard-scoped-caches",
        action="store_true",
        help="sharded runs (replicas > 1, unless a --runs token says plain) with --shard-scoped-caches",
    )
    kymas.add_argument(
        "--deployment-timings",
        action="store_true",
        help="the Deployment's Lease timings (10/7/1.5 s) instead of the tests' (4/3/0.5 s)",
    )
    kymas.add_argument(
        "--lease-timings",
        metavar="DURATION/RENEW/RETRY",
        type=lease_timings,
        help="other Lease timings in seconds (e.g. 60/40/5, upstream lifecycle-manager leases for 180 s), "
        "for an API server too slow for the defaults' renewals; overrides --deployment-timings",
    )
    kymas.add_argument(
        "--runs",
        nargs="+",
        help="instead of --replicas: one restart per token, N (1: no sharding; N > 1: sharded, scoped "
        "with --shard-scoped-caches), Nscoped (--sharding --shard-scoped-caches, also for N = 1) or "
        "Nplain (--sharding)",
    )
    kymas.add_argument(
        "--fleet-via",
        choices=("api", "etcd"),
        default="api",
        help="api: every object through the API server (and a first start converges it); etcd: --seeds Kymas "
        "through the API server, converged by the operator, the rest cloned from them into etcd",
    )
    kymas.add_argument(
        "--seeds", type=int, default=4, help="with --fleet-via etcd: Kymas created and converged for real"
    )
    kymas.add_argument(
        "--create-concurrency", type=int, default=48, help="API requests in flight while creating"
    )
    kymas.add_argument(
        "--create-only", action="store_true", help="create (and count) the fleet, start no operator"
    )
    kymas.add_argument(
        "--base",
        action="store_true",
        help="before each run, the same replicas on an empty fleet (catalog only): the fixed base RSS",
    )
    kymas.add_argument(
        "--resync-interval",
        type=float,
        default=0.0,
        help="run the operators with --kyma-healthy-interval (and unhealthy) of this many seconds and "
        "measure the CPU of the periodic full resync that follows the start-up round (0: not measured)",
    )
    kymas.add_argument(
        "--shards",
        type=int,
        default=16,
        help="the sharded replicas' --shards, and the shard labels the fleet is written with (default "
        "16, as manifests/kcp/operator-deployment.yaml)",
    )
    kymas.add_argument(
        "--stagger-resyncs",
        type=float,
        default=0.0,
        help="with --resync-interval S and several replicas: replica i runs with an interval of S + i x "
        "this many seconds, so that each replica's resync runs alone on the machine (as on nodes of "
        "their own), and each is measured in its own window (0: all at once, one window)",
    )
    kymas.add_argument(
        "--memprobe",
        type=int,
        default=0,
        help="run the operators with tracemalloc (this many frames) and print each one's top allocation "
        "sites after the settle (slows them: not for the RSS or CPU figures)",
    )
    kymas.add_argument(
        "--control-plane-gogc",
        type=int,
        default=0,
        help="GOGC of etcd and kube-apiserver (0: Go's default 100); lower keeps the API server's heap "
        "closer to its watch cache at 50,000 Kymas, at some CPU",
    )
    kymas.add_argument(
        "--event-probes",
        type=int,
        default=0,
        help="during each start-up round, change this many Kymas already reconciled in it (a label, "
        "one every --probe-spacing s) and report the time from the write to their next reconcile start: "
        "how long a user's change waits behind the round (0: none)",
    )
    kymas.add_argument(
        "--probe-spacing", type=float, default=0.5, help="seconds between two --event-probes writes"
    )
    kymas.add_argument(
        "--count-instructions",
        type=Path,
        metavar="DIR",
        help="with --resync-interval: run the operators under valgrind's callgrind and count each "
        "replica's resync in instructions too (benchmarks/instruction_count.py; dumps kept in DIR; "
        "50-140x slower: use long --lease-timings, e.g. 900/240/30)",
    )
    kymas.add_argument("--logs", type=Path, help="keep each operator's output in this directory")
    kymas.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds each restart may take until every Kyma was reconciled, and (at least 600) the "
        "API server may take to serve a fleet written into etcd (default 1800)",
    )
    kymas.add_argument("--settle", type=float, default=30.0, help="seconds after the last first reconcile")
    runtimes = sub.add_parser("runtimes", help="operator cost per real runtime API server")
    runtimes.add_argument("--runtimes", type=int, nargs="+", default=[10, 20, 40])
    runtimes.add_argument("--settle", type=float, default=20.0)
    runtimes.add_argument("--batch", type=int, default=5, help="runtime API servers started together")
    for scenario in (kymas, runtimes):
        scenario.add_argument(
            "--operator-tree",
            type=Path,
            help="another checkout whose operator is measured too, in the same run (before/after)",
        )
    args = parser.parse_args(argv)
    print(f"machine: {machine()}; repo {REPO_ROOT}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if args.scenario == "kymas":
        if args.fleet_via == "etcd" and args.seeds < 2:
            sys.exit("--fleet-via etcd needs at least 2 --seeds (one cloned, one to check the clone against)")
        if args.count_instructions:
            if not args.resync_interval:
                sys.exit("--count-instructions counts the resync: give --resync-interval too")
            try:
                require_callgrind()
            except CallgrindMissing as exc:
                sys.exit(str(exc))
            args.count_instructions.mkdir(parents=True, exist_ok=True)
        if max(args.replicas) > 1 and "--sharding" not in _operator_help():
            sys.exit("--replicas > 1 needs the operator's --sharding flags (not on this branch yet)")
        asyncio.run(kymas_scenario(args))
    else:
        asyncio.run(runtimes_scenario(args))


def _operator_help() -> str:
    return subprocess.run(
        [sys.executable, "-m", "kyma_operator", "--help"], capture_output=True, text=True, check=False
    ).stdout


if __name__ == "__main__":
    main()
