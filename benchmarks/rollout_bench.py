"""Fleet rollouts at scale (issue 27, docs/rollouts.md §16): who gets a bad version, how fast a halt
comes, how long a good version takes, and what the operator writes per Kyma.

Run: ``.venv/bin/python -m benchmarks.rollout_bench [--kymas 5000] [--canary 10]
[--scenarios upstream-bad upstream-good gated-bad gated-good] [--max-delay 60]``.
Recorded in ``benchmarks/results/rollout.md``.

How 5,000 runtimes are simulated (the scale benchmark's way, ``scale_bench.py kymas``): one etcd +
KCP API server with an **audit policy** (level ``Metadata`` for every write verb, JSON log); one
module; ``--kymas`` single-cluster Kymas (``operator.kyma-project.io/sync=false``, the module
enabled, channel ``regular``; ``--canary`` of them labelled ``operator.kyma-project.io/rollout-ring:
canary``) and one Manifest each, written as the Kyma controller writes them (its own
``desired_manifest``/``apply_body``, server-side apply), status Ready at ``1.0.0``. Then the operator
runs for real (``python -m kyma_operator``: module half on, Manifest controller off, agent off,
``--module-upgrade-rollout-max-delay`` = ``--max-delay``) and is left to converge (every Kyma
reconciled once, then quiet).

A **runtime simulator** in this process plays 5,000 runtimes + the Manifest controller: it watches
the Manifests and answers each new generation (a version change) after a per-runtime delay drawn
uniform in ``--install-delay`` (seeded) with the status a Manifest controller would write: ``Ready``
for a good version, ``Error`` ("Deployment not available") for a bad one, ``observedGeneration`` =
the answered generation. It uses its own user agent, so the audit log tells its writes apart.

Scenarios, one after the other on the same fleet (each moves the channel one minor version up):

* ``upstream-bad`` / ``upstream-good``: no ``ModuleRolloutPolicy``: upstream's behaviour (the
  ``CatalogFanout`` spread over ``--max-delay``). Figures: Kymas that received the version and
  when; time to 100 % Ready (good).
* ``gated-bad`` / ``gated-good`` (need the rollout controller): a policy like the shipped sample
  (canary selector wave, 10 %, 50 %, 100 %) with bench-scale durations (``--soak``,
  ``--deadline``). Figures: Kymas that received the bad version ``--after-halt`` seconds after the
  halt; first failure (the simulator's first ``Error`` write) -> the run's phase ``Halted`` seen by a
  watch here (and ``status.haltedAt``); time to 100 % with the policy.

Writes per Kyma: the audit log's events with the operator's user agent (``kyma-operator``) between
the channel change and the end of the scenario, grouped by resource/subresource and verb, divided by
the Kymas whose Manifest moved to the new version.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.scale_bench import Watched, _bounded, until_reconciled
from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.modulereleasemeta import ModuleReleaseMeta
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.api.resources import KYMAS, MANIFESTS, MODULE_RELEASE_METAS, MODULE_TEMPLATES
from kyma_operator.controllers.kyma.manifestbuild import desired_manifest
from kyma_operator.controllers.kyma.moduleresolution import Resolved
from kyma_operator.controllers.kyma.modulesync import FIELD_MANAGER, apply_body
from kyma_operator.runtime.errors import Conflict, KubeError, KubeTransportError, NotFound
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import NAMESPACES, Resource
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.crds import apply_crds
from tests.integration.kyma_operator.modules_env import release_meta, template
from tests.integration.kyma_operator.operator_process import OperatorProcess

JSON = dict[str, Any]
NAMESPACE = "kcp-system"
MODULE = "module-alpha"
COMPONENT = f"kyma-project.io/module/{MODULE}"
CHANNEL = "regular"
CANARY_LABEL = "operator.kyma-project.io/rollout-ring"
OPERATOR_AGENT = "kyma-operator"
BENCH_AGENT = "rollout-bench"
SIMULATOR_AGENT = "rollout-bench-simulator"
ROLLOUT_GROUP, ROLLOUT_VERSION = names.OPERATOR_GROUP, "v1alpha1"
ROLLOUTS = Resource(ROLLOUT_GROUP, ROLLOUT_VERSION, "modulerollouts", "ModuleRollout")
POLICIES = Resource(ROLLOUT_GROUP, ROLLOUT_VERSION, "modulerolloutpolicies", "ModuleRolloutPolicy")
HALT_PHASES = frozenset({"Halted", "Reverting", "Reverted"})
TERMINAL_PHASES = frozenset({"Completed", "Aborted", "Superseded", "Invalid", *HALT_PHASES})
SCENARIOS = ("upstream-bad", "upstream-good", "gated-bad", "gated-good")

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "None"},
    ],
}

OPERATOR_FLAGS = (
    "--watcher-enabled=false",
    "--manifest-controller-enabled=false",
    "--kyma-modules=true",
    "--leader-elect=false",
    "--log-level=INFO",
)


def now() -> float:
    return time.time()


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def audit_args(directory: Path) -> tuple[list[str], Path]:
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    log = directory / "audit.log"
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
        "--audit-log-mode=blocking",
    ], log


@dataclass(frozen=True)
class Write:
    at: float
    agent: str
    verb: str
    resource: str
    name: str
    code: int


def read_audit(log: Path) -> list[Write]:
    writes = []
    with log.open() as lines:
        for line in lines:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            writes.append(
                Write(
                    _ts(event.get("stageTimestamp")) or 0.0,
                    str(event.get("userAgent", "")),
                    str(event.get("verb")),
                    resource,
                    str(ref.get("name", "")),
                    int((event.get("responseStatus") or {}).get("code", 0)),
                )
            )
    return writes


# -- the fleet -------------------------------------------------------------------------------------


def version_of(index: int) -> str:
    return f"1.{index}.0"


async def create_fleet(
    kcp: KubeClient, kymas: int, canary: int, versions: int, concurrency: int = 48
) -> float:
    start = now()
    await kcp.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    tpl = None
    for i in range(versions):
        created = await kcp.create(
            MODULE_TEMPLATES, template(NAMESPACE, version_of(i), module=MODULE, component=COMPONENT)
        )
        tpl = tpl or created
    assert tpl is not None
    meta = await kcp.create(
        MODULE_RELEASE_METAS,
        release_meta(NAMESPACE, {CHANNEL: version_of(0)}, module=MODULE, component=COMPONENT),
    )
    resolved = Resolved(
        MODULE, CHANNEL, version_of(0), ModuleTemplate.from_object(tpl), ModuleReleaseMeta.from_object(meta)
    )

    async def one(index: int) -> None:
        labels = {names.SYNC_LABEL: names.DISABLE_LABEL_VALUE, names.RUNTIME_ID_LABEL: f"rt-{index:05d}"}
        if index < canary:
            labels[CANARY_LABEL] = "canary"
        body = {
            "metadata": {
                "name": f"kyma-{index:05d}",
                "namespace": NAMESPACE,
                "labels": labels,
                "finalizers": [names.KYMA_FINALIZER],
            },
            "spec": {"channel": CHANNEL, "modules": [{"name": MODULE}]},
        }
        kyma = Kyma.from_object(await kcp.create(KYMAS, body))
        manifest = desired_manifest(kyma, resolved)
        applied = await kcp.apply(MANIFESTS, apply_body(manifest), field_manager=FIELD_MANAGER)
        generation = applied["metadata"].get("generation", 1)
        await kcp.patch_status(
            MANIFESTS,
            manifest.name,
            {"status": {"state": "Ready", "observedGeneration": generation}},
            NAMESPACE,
        )

    await _bounded(range(kymas), one, concurrency)
    return now() - start


# -- the runtimes ----------------------------------------------------------------------------------


@dataclass
class Simulator:
    """5,000 runtimes + the Manifest controller: answers each new Manifest generation with a status."""

    client: KubeClient
    bad: set[str]
    rng: random.Random
    install_delay: tuple[float, float]
    version_at: dict[str, str] = field(default_factory=dict)
    """Manifest -> spec.version last seen."""
    received: dict[str, dict[str, float]] = field(default_factory=dict)
    """version -> Manifest -> when its spec first showed the version (watch time)."""
    answered: dict[str, dict[str, tuple[str, float]]] = field(default_factory=dict)
    """version -> Manifest -> (state written, when the write returned)."""
    first_error: dict[str, float] = field(default_factory=dict)
    _scheduled: set[tuple[str, int]] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def run(self) -> None:
        listed = await self.client.list_all(MANIFESTS, NAMESPACE)
        for obj in listed.items:
            self._seen(obj)
        rv = listed.resource_version
        while True:
            try:
                async for event in self.client.watch(MANIFESTS, NAMESPACE, resource_version=rv):
                    if event.type == "BOOKMARK":
                        rv = event.object["metadata"]["resourceVersion"]
                        continue
                    if event.type == "ERROR":
                        raise NotFound(410, "Gone", "watch expired")
                    rv = event.object["metadata"]["resourceVersion"]
                    if event.type != "DELETED":
                        self._seen(event.object)
            except KubeError:
                listed = await self.client.list_all(MANIFESTS, NAMESPACE)
                for obj in listed.items:
                    self._seen(obj)
                rv = listed.resource_version

    def _seen(self, obj: JSON) -> None:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        name, version, generation = meta["name"], str(spec.get("version")), int(meta.get("generation", 1))
        if self.version_at.get(name) != version:
            self.version_at[name] = version
            self.received.setdefault(version, {}).setdefault(name, now())
        if int(status.get("observedGeneration") or 0) >= generation or (name, generation) in self._scheduled:
            return
        self._scheduled.add((name, generation))
        task = asyncio.create_task(self._answer(name, version, generation))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, name: str, version: str, generation: int) -> None:
        await asyncio.sleep(self.rng.uniform(*self.install_delay))  # the simulated install
        failed = version in self.bad
        status: JSON = {
            "state": "Error" if failed else "Ready",
            "observedGeneration": generation,
            "lastOperation": {
                "operation": "Deployment not available"
                if failed
                else "installation is ready and resources can be used",
                "lastUpdateTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
        for _ in range(5):
            try:
                await self.client.patch_status(MANIFESTS, name, {"status": status}, NAMESPACE)
                break
            except Conflict:
                continue
            except (NotFound, KubeTransportError):  # gone, or the control plane is shutting down
                return
        at = now()
        self.answered.setdefault(version, {})[name] = (status["state"], at)
        if failed:
            self.first_error.setdefault(version, at)

    def ready_at(self, version: str) -> list[float]:
        return sorted(at for state, at in self.answered.get(version, {}).values() if state == "Ready")

    def holding(self, version: str) -> int:
        return sum(1 for v in self.version_at.values() if v == version)


# -- rollout runs ----------------------------------------------------------------------------------


@dataclass
class RunWatch:
    """Phase changes of every ModuleRollout, as a watch here sees them."""

    client: KubeClient
    phases: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    objects: dict[str, JSON] = field(default_factory=dict)
    available: bool = True

    async def run(self) -> None:
        try:
            listed = await self.client.list_all(ROLLOUTS, NAMESPACE)
        except NotFound:
            self.available = False
            return
        for obj in listed.items:
            self._seen(obj)
        rv = listed.resource_version
        while True:
            try:
                async for event in self.client.watch(ROLLOUTS, NAMESPACE, resource_version=rv):
                    if event.type == "ERROR":
                        raise NotFound(410, "Gone", "watch expired")
                    rv = event.object["metadata"]["resourceVersion"]
                    if event.type in ("ADDED", "MODIFIED"):
                        self._seen(event.object)
            except KubeError:
                listed = await self.client.list_all(ROLLOUTS, NAMESPACE)
                for obj in listed.items:
                    self._seen(obj)
                rv = listed.resource_version

    def _seen(self, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        self.objects[name] = obj
        phase = str((obj.get("status") or {}).get("phase") or "")
        history = self.phases.setdefault(name, [])
        if phase and (not history or history[-1][0] != phase):
            history.append((phase, now()))

    def run_for(self, to_version: str) -> str | None:
        for name, obj in self.objects.items():
            if (obj.get("spec") or {}).get("toVersion") == to_version:
                return name
        return None

    def first(self, name: str, phases: frozenset[str]) -> tuple[str, float] | None:
        return next(((p, at) for p, at in self.phases.get(name, []) if p in phases), None)


def policy(args: argparse.Namespace) -> JSON:
    deadline, soak = f"{args.deadline}s", f"{args.soak}s"
    return {
        "apiVersion": f"{ROLLOUT_GROUP}/{ROLLOUT_VERSION}",
        "kind": "ModuleRolloutPolicy",
        "metadata": {"name": "bench-gated", "namespace": NAMESPACE},
        "spec": {
            "modules": [{"name": MODULE, "channels": [CHANNEL]}],
            "onFailure": "Halt",
            "waves": [
                {
                    "name": "canary",
                    "selector": {"matchLabels": {CANARY_LABEL: "canary"}},
                    "minUpgraded": 1,
                    "progressDeadline": deadline,
                    "soakTime": soak,
                    "maxFailures": 0,
                },
                {
                    "name": "early",
                    "upToPercent": 10,
                    "progressDeadline": deadline,
                    "soakTime": soak,
                    "maxFailures": "1%",
                },
                {
                    "name": "half",
                    "upToPercent": 50,
                    "progressDeadline": deadline,
                    "soakTime": soak,
                    "maxFailures": "1%",
                },
                {"name": "rest", "upToPercent": 100, "progressDeadline": deadline, "maxFailures": "2%"},
            ],
        },
    }


# -- one scenario ----------------------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: str
    version: str
    kymas: int
    lines: list[str] = field(default_factory=list)


async def _until(check: Any, limit: float, what: str, interval: float = 0.2) -> float:
    """Seconds until ``check()`` is true (the benchmark's own observation loop, with a deadline)."""
    start = now()
    while not check():
        if now() - start > limit:
            raise TimeoutError(f"{what}: not after {limit:.0f} s")
        await asyncio.sleep(interval)
    return now() - start


async def set_channel(kcp: KubeClient, version: str) -> float:
    current = await kcp.get(MODULE_RELEASE_METAS, MODULE, NAMESPACE)
    current["spec"]["channels"] = [{"channel": CHANNEL, "version": version}]
    await kcp.update(MODULE_RELEASE_METAS, current)
    return now()


def spread_line(sim: Simulator, version: str, t0: float, max_delay: float) -> str:
    """When the Manifests showed the version: the spread itself vs the operator's throughput."""
    times = sorted(at - t0 for at in sim.received.get(version, {}).values())
    if not times:
        return "no Manifest received the version"
    within = sum(1 for t in times if t <= max_delay)

    def q(p: float) -> float:
        return times[min(len(times) - 1, int(p * len(times)))]

    return (
        f"Manifest at the new version after the channel change: p50 {q(0.5):.1f} s, p90 {q(0.9):.1f} s, "
        f"last {times[-1]:.1f} s; {within} of {len(times)} within the {max_delay:.0f} s max delay"
    )


def writes_table(writes: Sequence[Write], start: float, end: float, upgraded: int) -> list[str]:
    ours = [w for w in writes if w.agent.startswith(OPERATOR_AGENT) and start <= w.at <= end]
    counts = Counter((w.resource, w.verb) for w in ours)
    failed = Counter((w.resource, w.verb) for w in ours if w.code >= 300)
    lines = [
        f"operator writes (audit log, user agent {OPERATOR_AGENT}) between the channel change and the end, "
        f"{upgraded} Kymas upgraded:",
        "| resource | verb | writes | per upgraded Kyma | of them failed (409 etc.) |",
        "|---|---|---|---|---|",
    ]
    for (resource, verb), n in sorted(counts.items()):
        per = n / upgraded if upgraded else float("nan")
        lines.append(f"| {resource} | {verb} | {n} | {per:.3f} | {failed[(resource, verb)]} |")
    total = sum(counts.values())
    lines.append(
        f"| all | | {total} | {total / upgraded if upgraded else float('nan'):.3f} | {sum(failed.values())} |"
    )
    return lines


async def scenario(
    name: str,
    version: str,
    args: argparse.Namespace,
    kcp: KubeClient,
    sim: Simulator,
    runs: RunWatch,
    audit_log: Path,
) -> Outcome:
    out = Outcome(name, version, args.kymas)
    gated, bad = name.startswith("gated"), name.endswith("bad")
    if bad:
        sim.bad.add(version)
    if gated:
        if not runs.available:
            out.lines.append(
                "skipped: this API server has no ModuleRollout CRD (the rollout code is not merged)"
            )
            return out
        with contextlib.suppress(Conflict):
            await kcp.create(POLICIES, policy(args))
    t0 = await set_channel(kcp, version)
    limit = args.timeout
    if not gated and bad:
        took = await _until(lambda: sim.holding(version) >= args.kymas, limit, "bad version everywhere")
        first = min(sim.received.get(version, {}).values(), default=t0)
        errors = sum(1 for s, _ in sim.answered.get(version, {}).values() if s == "Error")
        out.lines += [
            spread_line(sim, version, t0, args.max_delay),
            f"Kymas that received the bad version: **{sim.holding(version)} of {args.kymas}**, "
            f"all within {took:.1f} s of the channel change (first after {first - t0:.1f} s; "
            f"--module-upgrade-rollout-max-delay {args.max_delay:.0f} s); nothing stopped it "
            f"({errors} runtimes had reported Error by then)",
        ]
        end = now()
    elif not gated:
        took = await _until(
            lambda: len(sim.ready_at(version)) >= args.kymas, limit, "good version Ready everywhere"
        )
        out.lines.append(spread_line(sim, version, t0, args.max_delay))
        out.lines.append(
            f"time to 100 % Ready at the new version, no policy (upstream's spread, max delay "
            f"{args.max_delay:.0f} s): **{took:.1f} s**"
        )
        end = now()
    elif bad:
        await _until(lambda: runs.run_for(version) is not None, limit, "rollout run created")
        run = runs.run_for(version)
        assert run is not None
        await _until(lambda: runs.first(run, HALT_PHASES | {"Completed"}) is not None, limit, "run halted")
        halt = runs.first(run, HALT_PHASES | {"Completed"})
        assert halt is not None
        halted_seen = halt[1]
        await asyncio.sleep(args.after_halt)  # the figure is "who has it after the halt + N s"
        end = now()
        status = runs.objects[run].get("status") or {}
        first_error = sim.first_error.get(version)
        halted_at = _ts(status.get("haltedAt"))
        latency = f"{halted_seen - first_error:.2f} s" if first_error is not None else "- (no Error written)"
        stamp = (
            f"{halted_at - first_error:.1f} s by status.haltedAt (1 s resolution)"
            if halted_at is not None and first_error is not None
            else "status.haltedAt not set"
        )
        out.lines += [
            f"run {run}: phase **{halt[0]}** {halted_seen - t0:.1f} s after the channel change; reason: "
            f"{status.get('haltReason')!r}",
            f"first failure (simulator's first Error write) -> phase {halt[0]} seen by a watch: "
            f"**{latency}** ({stamp})",
            f"Kymas that received the bad version {args.after_halt:.0f} s after the halt: "
            f"**{sim.holding(version)} of {args.kymas}** (canary wave {args.canary}, budget 0)",
        ]
    else:
        await _until(lambda: runs.run_for(version) is not None, limit, "rollout run created")
        run = runs.run_for(version)
        assert run is not None
        took = await _until(
            lambda: len(sim.ready_at(version)) >= args.kymas or runs.first(run, TERMINAL_PHASES) is not None,
            limit,
            "good version rolled out",
        )
        end = now()
        status = runs.objects[run].get("status") or {}
        phases = " -> ".join(f"{p} (+{at - t0:.1f} s)" for p, at in runs.phases.get(run, []))
        ready = sim.ready_at(version)
        waves = [(w.get("name"), w.get("members"), w.get("ready")) for w in status.get("waves") or []]
        if status.get("haltReason"):
            out.lines.append(f"halt reason: {status['haltReason']!r}")
        out.lines += [
            f"run {run}: {phases}; waves (name, members, ready) {waves}",
            f"time to 100 % Ready at the new version with the policy (soak {args.soak} s, deadline "
            f"{args.deadline} s): **{(ready[-1] - t0) if len(ready) >= args.kymas else float('nan'):.1f} s** "
            f"({len(ready)} of {args.kymas} Ready after {took:.1f} s)",
        ]
    await asyncio.sleep(args.quiet)  # let trailing writes (Kyma status) land inside the window
    end = max(end, now())
    upgraded = sim.holding(version)
    out.lines += writes_table(read_audit(audit_log), t0, end, upgraded)
    return out


# -- main ------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def background(*coros: Any) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def main_async(args: argparse.Namespace) -> list[Outcome]:
    outcomes: list[Outcome] = []
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rollout-bench-"))
    extra, audit_log = audit_args(workdir / "audit")
    try:
        await _run(args, workdir, extra, audit_log, outcomes)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return outcomes


async def _run(
    args: argparse.Namespace, workdir: Path, extra: list[str], audit_log: Path, outcomes: list[Outcome]
) -> None:
    with ControlPlane(["kcp"], workdir=workdir, extra_apiserver_args={"kcp": extra}) as plane:
        kubeconfig = plane["kcp"].kubeconfig_path
        apply_crds(kubeconfig)
        async with (
            KubeClient.from_kubeconfig_file(kubeconfig, user_agent=BENCH_AGENT, max_concurrency=48) as kcp,
            KubeClient.from_kubeconfig_file(
                kubeconfig, user_agent=SIMULATOR_AGENT, max_concurrency=48
            ) as sim_client,
        ):
            took = await create_fleet(kcp, args.kymas, args.canary, len(args.scenarios) + 1)
            print(f"fleet: {args.kymas} Kymas + Manifests created in {took:.0f} s", flush=True)
            sim = Simulator(sim_client, set(), random.Random(args.seed), tuple(args.install_delay))
            runs = RunWatch(kcp)
            process = await OperatorProcess.start(
                kubeconfig, NAMESPACE, *OPERATOR_FLAGS, f"--module-upgrade-rollout-max-delay={args.max_delay}"
            )
            watched = Watched(process, time.monotonic())
            try:
                async with background(sim.run(), runs.run()):
                    converged, _ = await until_reconciled([watched], args.kymas, args.timeout)
                    print(f"operator: every Kyma reconciled once after {converged:.1f} s", flush=True)
                    await asyncio.sleep(args.quiet)
                    for index, name in enumerate(args.scenarios, 1):
                        outcome = await scenario(name, version_of(index), args, kcp, sim, runs, audit_log)
                        outcomes.append(outcome)
                        print(f"\n## {name}: {version_of(index - 1)} -> {version_of(index)}", flush=True)
                        print("\n".join(outcome.lines), flush=True)
            finally:
                await process.stop()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kymas", type=int, default=5000, help="Kymas in the fleet (one module each).")
    parser.add_argument("--canary", type=int, default=10, help="Kymas labelled as the canary ring.")
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=SCENARIOS,
        default=list(SCENARIOS),
        help="Scenarios to run, in order.",
    )
    parser.add_argument(
        "--max-delay",
        type=float,
        default=60.0,
        help="--module-upgrade-rollout-max-delay of the operator (s).",
    )
    parser.add_argument(
        "--install-delay", type=float, nargs=2, default=(1.0, 5.0), help="Simulated install time range (s)."
    )
    parser.add_argument("--soak", type=int, default=10, help="Policy soakTime per wave (s).")
    parser.add_argument("--deadline", type=int, default=60, help="Policy progressDeadline per wave (s).")
    parser.add_argument(
        "--after-halt", type=float, default=30.0, help="Seconds after a halt to count holders."
    )
    parser.add_argument("--quiet", type=float, default=3.0, help="Seconds to let trailing writes land.")
    parser.add_argument("--timeout", type=float, default=600.0, help="Give up on a step after this (s).")
    parser.add_argument("--seed", type=int, default=27, help="Seed of the simulated install delays.")
    parser.add_argument("--workdir", default=None, help="Control plane work directory (default: a temp dir).")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    print(f"rollout_bench {' '.join(sys.argv[1:])}", flush=True)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
