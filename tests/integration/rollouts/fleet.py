"""A fleet of Kymas on the session's KCP API server for the rollout tests (docs/rollouts.md §15).

What is real: the KCP API server and etcd, the operator (``kyma_operator.app``: the Kyma controller
with its module half on every Kyma, the leader's rollout controller and starter), every object it
reads and writes. The Kymas are single-cluster Kymas (label ``operator.kyma-project.io/sync=false``):
their modules' Manifests are written by the operator exactly as for a remote runtime, without an
access Secret per Kyma, so one test holds a fleet of ten.

What plays a part: ``Runtimes`` stands in for the Manifest controller and the modules in the
runtimes (as the rollout benchmark's simulator does): it watches the Manifests (a real informer)
and, for each spec it has not answered yet, writes the status a Manifest controller would write
for that version's behaviour: ``Ready`` (a good version), ``Error`` (the module's Deployment is
not available), or nothing (never becomes Ready: the progress deadline decides). It records every
version change of a Manifest with its resourceVersion, which orders it against the run's status
writes (one etcd: resourceVersions are one sequence).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.resources import (
    KYMAS,
    MANIFESTS,
    MODULE_RELEASE_METAS,
    MODULE_ROLLOUT_POLICIES,
    MODULE_ROLLOUTS,
    MODULE_TEMPLATES,
)
from kyma_operator.runtime.clock import utc_now
from kyma_operator.runtime.errors import NotFound
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.resources import CORE_EVENTS
from tests.integration.kyma_operator.harness import RunningOperator
from tests.integration.kyma_operator.modules_env import MODULE, release_meta, template
from tests.polling import eventually

HOUR = 3600.0


class ShiftedWallClock:
    """The operator's wall clock for a test: real time plus an offset the test moves forward, so a
    soak is over when the test says (no waiting it out), and later soaks still run on real time."""

    def __init__(self) -> None:
        self.offset = datetime.timedelta()

    def __call__(self) -> datetime.datetime:
        return utc_now() + self.offset

    def advance(self, delta: datetime.timedelta) -> None:
        self.offset += delta


def rollout_reconciles(operator: RunningOperator) -> float:
    """Finished reconciles of the rollout controller (the manager's metrics)."""
    registry = operator.operator.manager.registry
    total = 0.0
    for result in ("success", "requeue", "requeue_after", "error"):
        value = registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "rollout", "result": result}
        )
        total += value or 0.0
    return total


async def reconciled_once_more(client: KubeClient, operator: RunningOperator, ns: str, name: str) -> None:
    """Wake the run with a label write and wait until the rollout controller has reconciled again."""
    finished = rollout_reconciles(operator)
    await client.patch(MODULE_ROLLOUTS, name, {"metadata": {"labels": {"poke": str(finished)}}}, ns)
    await eventually(lambda: rollout_reconciles(operator) > finished, "a reconcile of the run")


RING_LABEL = "operator.kyma-project.io/rollout-ring"
OLD, NEW = "1.0.0", "1.1.0"
Behaviour = Mapping[str, str | None]
"""Version -> the state its module reaches in a runtime (None: it never reports one)."""


def rollout_name(version: str = NEW, channel: str = "regular", module: str = MODULE) -> str:
    return f"{module}-{channel}-{version}"


def kyma_body(
    ns: str,
    name: str,
    *,
    ring: str | None = None,
    channel: str = "regular",
    modules: tuple[str, ...] = (MODULE,),
) -> dict[str, Any]:
    labels = {names.SYNC_LABEL: "false", names.RUNTIME_ID_LABEL: f"rt-{name}"}
    if ring is not None:
        labels[RING_LABEL] = ring
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"channel": channel, "modules": [{"name": m} for m in modules]},
    }


def policy_body(
    ns: str,
    *,
    name: str = "gated",
    deadline: str = "20s",
    soak: str = "1s",
    on_failure: str = "Halt",
    percent_waves: tuple[int, ...] = (50, 100),
    channels: tuple[str, ...] = ("regular",),
    hold_channel_switches: bool = False,
    module: str = MODULE,
) -> dict[str, Any]:
    waves: list[dict[str, Any]] = [
        {
            "name": "canary",
            "selector": {"matchLabels": {RING_LABEL: "canary"}},
            "minUpgraded": 1,
            "progressDeadline": deadline,
            "soakTime": soak,
            "maxFailures": 0,
        }
    ]
    for i, percent in enumerate(percent_waves):
        waves.append(
            {
                "name": f"p{percent}" if i < len(percent_waves) - 1 else "rest",
                "upToPercent": percent,
                "progressDeadline": deadline,
                "soakTime": soak,
                "maxFailures": 0,
            }
        )
    spec: dict[str, Any] = {
        "modules": [{"name": module, "channels": list(channels)}],
        "onFailure": on_failure,
        "holdChannelSwitches": hold_channel_switches,
        "waves": waves,
    }
    return {
        "apiVersion": names.MODULE_ROLLOUT_POLICY.api_version,
        "kind": names.MODULE_ROLLOUT_POLICY.kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


@dataclass(frozen=True)
class VersionChange:
    kyma: str
    version: str
    resource_version: int
    reverted_by: str | None


@dataclass
class Runtimes:
    """The Manifest controller's and the runtimes' part, by each version's ``behaviour``."""

    client: KubeClient
    ns: str
    behaviour: dict[str, str | None]
    changes: list[VersionChange] = field(default_factory=list)
    spec_writes: dict[str, int] = field(default_factory=dict)
    """Manifest name -> spec writes seen (creation included)."""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _answered: dict[str, int] = field(default_factory=dict)
    _unanswered: dict[str, tuple[int, str]] = field(default_factory=dict)

    def _handle(self, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = obj["metadata"]
        name = meta["name"]
        generation = int(meta.get("generation") or 0)
        old_generation = int(((old or {}).get("metadata") or {}).get("generation") or 0)
        if old is None or generation != old_generation:
            self.spec_writes[name] = self.spec_writes.get(name, 0) + 1
        version = str((obj.get("spec") or {}).get("version") or "")
        old_version = str(((old or {}).get("spec") or {}).get("version") or "")
        if old is not None and version != old_version:
            self.changes.append(
                VersionChange(
                    kyma=meta["labels"][names.KYMA_NAME_LABEL],
                    version=version,
                    resource_version=int(meta["resourceVersion"]),
                    reverted_by=(meta.get("annotations") or {}).get(names.REVERTED_BY_ANNOTATION),
                )
            )
        if meta.get("deletionTimestamp") or self._answered.get(name) == generation:
            return
        state = self.behaviour.get(version, "Ready")
        if state is None:  # no answer (yet): ``answer(version)`` may give one later
            self._unanswered[name] = (generation, version)
            return
        self._answer(name, generation, version, state)

    def answer(self, version: str, state: str = "Ready") -> None:
        """From now on ``version`` reports ``state``, starting with the Manifests left unanswered."""
        self.behaviour[version] = state
        for name, (generation, pending) in list(self._unanswered.items()):
            if pending == version:
                self._answer(name, generation, version, state)

    def _answer(self, name: str, generation: int, version: str, state: str) -> None:
        self._unanswered.pop(name, None)
        self._answered[name] = generation
        task = asyncio.create_task(self._report(name, generation, version, state))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _report(self, name: str, generation: int, version: str, state: str) -> None:
        status = {
            "state": state,
            "observedGeneration": generation,
            "lastOperation": {
                "operation": f"module {version} "
                + ("installed" if state == "Ready" else "Deployment not available")
            },
        }
        with contextlib.suppress(NotFound):
            await self.client.patch_status(MANIFESTS, name, {"status": status}, self.ns)

    def upgraded(self, version: str = NEW) -> list[VersionChange]:
        return [c for c in self.changes if c.version == version and c.reverted_by is None]


@contextlib.asynccontextmanager
async def runtimes(client: KubeClient, ns: str, behaviour: dict[str, str | None]) -> AsyncIterator[Runtimes]:
    sim = Runtimes(client, ns, behaviour)
    informer = Informer(client, MANIFESTS, namespace=ns, name="test-manifests")
    informer.add_handler(
        FuncHandler(on_add=lambda o: sim._handle(o, None), on_update=lambda old, new: sim._handle(new, old))
    )
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_synced(15.0)
        yield sim
    finally:
        task.cancel()
        await asyncio.gather(task, *sim._tasks, return_exceptions=True)


async def publish(
    client: KubeClient,
    ns: str,
    channels: dict[str, str],
    versions: tuple[str, ...] = (OLD, NEW),
    mandatory: str | None = None,
) -> None:
    for version in versions:
        await client.create(MODULE_TEMPLATES, template(ns, version))
    await client.create(MODULE_RELEASE_METAS, release_meta(ns, channels, mandatory=mandatory))


async def set_mandatory(client: KubeClient, ns: str, version: str) -> None:
    await client.patch(MODULE_RELEASE_METAS, MODULE, {"spec": {"mandatory": {"version": version}}}, ns)


async def set_channel(client: KubeClient, ns: str, channels: dict[str, str]) -> None:
    spec = {"channels": [{"channel": c, "version": v} for c, v in channels.items()]}
    await client.patch(MODULE_RELEASE_METAS, MODULE, {"spec": spec}, ns)


async def run_or_none(client: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return await client.get(MODULE_ROLLOUTS, name, ns)
    except NotFound:
        return None


async def create_policy(client: KubeClient, ns: str, **kwargs: Any) -> dict[str, Any]:
    return await client.create(MODULE_ROLLOUT_POLICIES, policy_body(ns, **kwargs))


async def events_of(client: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    items = (await client.list_all(CORE_EVENTS, ns)).items
    return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]


async def manifests_of(client: KubeClient, ns: str) -> dict[str, dict[str, Any]]:
    """Kyma name -> its Manifest of the module."""
    items = (await client.list_all(MANIFESTS, ns)).items
    return {m["metadata"]["labels"][names.KYMA_NAME_LABEL]: m for m in items}


async def kymas_of(client: KubeClient, ns: str) -> list[dict[str, Any]]:
    return list((await client.list_all(KYMAS, ns)).items)


KYMA_COUNT = 10
CANARIES = ("k0", "k1")


@contextlib.asynccontextmanager
async def run_history(client: KubeClient, ns: str) -> AsyncIterator[list[dict[str, Any]]]:
    """Every version of every run a watch sees, in order."""
    seen: list[dict[str, Any]] = []
    informer = Informer(client, MODULE_ROLLOUTS, namespace=ns, name="test-rollouts")
    informer.add_handler(FuncHandler(on_add=seen.append, on_update=lambda _old, new: seen.append(new)))
    task = asyncio.create_task(informer.run())
    try:
        await informer.wait_synced(15.0)
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def fleet_at(
    kcp: KubeClient,
    ns: str,
    version: str = OLD,
    count: int = KYMA_COUNT,
    modules: tuple[str, ...] = (MODULE,),
) -> None:
    """``count`` Kymas (``CANARIES`` in the canary ring) with ``modules`` (the module's Manifest,
    or the mandatory one without), each Manifest Ready at ``version``."""
    for i in range(count):
        name = f"k{i}"
        ring = "canary" if name in CANARIES else None
        await kcp.create(KYMAS, kyma_body(ns, name, ring=ring, modules=modules))

    async def all_ready() -> bool:
        found = await manifests_of(kcp, ns)
        return len(found) == count and all(
            (m.get("status") or {}).get("state") == "Ready" and m["spec"]["version"] == version
            for m in found.values()
        )

    await eventually(all_ready, f"every Kyma's Manifest Ready at {version}", within=30)


def frontier_moves(history: list[dict[str, Any]]) -> dict[int, int]:
    """Wave index -> resourceVersion of the first status write whose frontier released any of it."""
    moves: dict[int, int] = {}
    for obj in history:
        frontier = (obj.get("status") or {}).get("frontier") or {}
        wave = int(frontier.get("wave") or 0)
        threshold = float(frontier.get("threshold") or 0)
        rv = int(obj["metadata"]["resourceVersion"])
        for w in range(wave):
            moves.setdefault(w, rv)
        if threshold > 0:
            moves.setdefault(wave, rv)
    return moves


async def run_in_phase(client: KubeClient, ns: str, name: str, *phases: str) -> dict[str, Any] | None:
    run = await run_or_none(client, ns, name)
    return run if run is not None and (run.get("status") or {}).get("phase") in phases else None
