"""Follows a rolling-out module workload with a short watch, so its Manifest turns Ready when the
workload does, not at the next look.

Why: a Manifest whose Deployment (or StatefulSet) is still rolling out is Processing. What used to
find it Ready was the runtime agent's event, sent from an admission call *before* the API server
stores the write, and the settle looks after it (30 ms, 0.1 s, 1 s), or the 5 s poll
(``processing_interval``), or, in a runtime without an agent, only the poll. The events of one
rollout's status writes fall into the Manifest's 0.5 s throttle window opened by the install's own
echoes, so in every traced enable the reconcile that wrote ``Ready`` was a settle look, which
started 22-26 ms after the rollout was done at p50, up to 98 ms at p99 (step 5a of
``benchmarks.enable_steps``; ``benchmarks/results/enable_steps.md``).

A watch of that one workload (``fieldSelector=metadata.name=...``) from the resourceVersion the
reconcile read delivers each status write *after* it is stored, so the reconcile it wakes reads
the new status. Only the turn is forwarded: a Deployment whose readiness rule
(``readiness.deployment_readiness``) no longer says Processing, a StatefulSet with every replica
ready, or the workload gone; the intermediate status writes of a rollout wake nothing. The woken
reconcile starts 1.5-4.5 ms after the rollout is done at p50. Together with the LISTs of
``apply.ListVersions`` (without them that reconcile's LIST waited for the API server's cache),
step 5a went from 75-89 to 18-25 ms at p50, from 105-111 to 47-71 ms at p99.

Bounded:
* one watch per Manifest, at most ``limit`` at once (``--manifest-workload-watches``; beyond it
  the poll alone, counted as ``refused``; 0 turns the watches off); each costs one connection and
  90-110 KiB (``config.DEFAULT_WORKLOAD_WATCHES``);
* each for ``duration`` seconds after the last reconcile that found the Manifest Processing
  (twice the Processing poll's interval: the poll's next reconcile extends it, so a rollout of
  minutes is followed by one watch, re-opened from the last version seen whenever the API server
  ends a stream); a watch whose Manifest is no longer reconciled here (its shard moved) ends by
  itself;
* ended when its Manifest is reconciled to anything but Processing, and with its runtime client
  (closing a client ends its watches).

A watch that fails (the runtime unreachable, an expired resourceVersion) ends quietly, counted as
``failed``: the poll still runs. Reconciles stay level-based: the watch only decides *when* the
next one runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from kyma_operator.api.meta import State
from kyma_operator.controllers.manifest.config import DEFAULT_WORKLOAD_WATCHES
from kyma_operator.controllers.manifest.readiness import deployment_readiness, manager_of
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.resources import DEPLOYMENTS, STATEFULSETS, Resource
from kyma_operator.runtime.source import Enqueuer

log = logging.getLogger(__name__)

OUTCOMES: Final = ("turned", "gone", "expired", "failed", "refused", "left")
"""How a watch ends (the ``outcome`` label): the workload turned (Ready, or Error by the readiness
rule) or went, the watch's time ran out or it failed, no watch was opened because ``limit`` were
open, or its Manifest was reconciled to another state first."""

_SHORTEST_STREAM: Final = 0.5
"""A stream the API server ends sooner than this after it was opened did not end by its timeout
(at least 1 s): the watch is not opened again."""

_RESOURCES: Final = {"Deployment": DEPLOYMENTS, "StatefulSet": STATEFULSETS}


@dataclass(frozen=True, slots=True)
class Workload:
    """The module workload a Processing Manifest waits for, as its reconcile read it."""

    resource: Resource
    namespace: str
    name: str
    resource_version: str

    @classmethod
    def of(cls, live: Sequence[JSON]) -> Workload | None:
        """The workload that decides readiness (``readiness.manager_of``) among the objects read,
        or None (none, or read without a namespace, name or resourceVersion)."""
        manager = manager_of(live)
        if manager is None:
            return None
        meta = manager.get("metadata") or {}
        resource = _RESOURCES.get(str(manager.get("kind")))
        namespace, name, version = meta.get("namespace"), meta.get("name"), meta.get("resourceVersion")
        if resource is None or not namespace or not name or not version:
            return None
        return cls(resource, str(namespace), str(name), str(version))


def turned(obj: JSON) -> bool:
    """Whether a watched workload no longer rolls out: what the Manifest's reconcile should see."""
    if obj.get("kind") == "StatefulSet":
        replicas = (obj.get("spec") or {}).get("replicas", 1)
        return bool(replicas == ((obj.get("status") or {}).get("readyReplicas") or 0))
    return deployment_readiness(obj).state is not State.PROCESSING


@dataclass(slots=True)
class _Following:
    client: KubeClient
    workload: Workload
    until: float
    """Clock time after which no stream is opened any more (extended by each ``follow``)."""
    task: asyncio.Task[None] | None = None


class WorkloadWatches:
    """A ``RunnableSource`` of the Manifest controller: ``follow`` after a Processing reconcile,
    ``leave`` after any other; each turn adds the Manifest with ``ManifestTrigger.WORKLOAD_TURNED``."""

    def __init__(
        self,
        *,
        limit: int = DEFAULT_WORKLOAD_WATCHES,
        duration: float = 10.0,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if limit < 0:
            raise ValueError("limit must not be negative")
        if duration <= 0:
            raise ValueError("duration must be positive")
        self.limit = limit
        self.duration = duration
        self.clock = clock or RealClock()
        self._queue: Enqueuer | None = None
        self._following: dict[Request, _Following] = {}
        self._running = False
        self.streams_opened = 0
        """Watch streams opened so far (a followed workload's stream is opened again when the API
        server ends it)."""
        registry = registry or CollectorRegistry()
        self._open = Gauge(
            "kyma_operator_manifest_workload_watches",
            "Module workloads followed by a watch now (their Manifests Processing).",
            registry=registry,
        )
        self._ended = Counter(
            "kyma_operator_manifest_workload_watches_ended",
            "Workload watches by how they ended: turned, gone, expired, failed, refused (the limit "
            "was reached), left (the Manifest was reconciled to another state first).",
            ["outcome"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self._ended.labels(outcome)

    # -- RunnableSource ------------------------------------------------------------------------------

    def bind(self, queue: Enqueuer) -> None:
        if self._queue is not None:
            raise RuntimeError("source is already bound to a controller")
        self._queue = queue

    async def run(self) -> None:
        """Follow workloads while the controller runs; stopping ends every watch."""
        self._running = True
        try:
            await asyncio.Event().wait()
        finally:
            self._running = False
            tasks = [f.task for f in self._following.values() if f.task is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._following.clear()
            self._open.set(0)

    # -- the reconcile's side ----------------------------------------------------------------------

    def follow(self, request: Request, client: KubeClient, workload: Workload) -> None:
        """Watch ``workload`` for ``request``'s Manifest (kept if already watched on this client)."""
        if not self._running or self.limit == 0:
            return
        until = self.clock.now() + self.duration
        current = self._following.get(request)
        if current is not None:
            if current.client is client and _same_object(current.workload, workload):
                current.until = until
                return
            self._end(request, "left")
        if len(self._following) >= self.limit:
            self._ended.labels("refused").inc()
            return
        following = self._following[request] = _Following(client, workload, until)
        following.task = asyncio.create_task(self._watch(request, following), name=f"workload-{request}")
        self._open.set(len(self._following))

    def leave(self, request: Request) -> None:
        """The Manifest's reconcile found another state: its workload is no longer followed."""
        if request in self._following:
            self._end(request, "left")

    def following(self, request: Request) -> Workload | None:
        current = self._following.get(request)
        return current.workload if current is not None else None

    def __len__(self) -> int:
        return len(self._following)

    # -- the watch ---------------------------------------------------------------------------------

    def _end(self, request: Request, outcome: str) -> None:
        current = self._following.pop(request, None)
        if current is None:
            return
        if current.task is not None and current.task is not asyncio.current_task():
            current.task.cancel()
        self._ended.labels(outcome).inc()
        self._open.set(len(self._following))

    async def _watch(self, request: Request, following: _Following) -> None:
        workload = following.workload
        version = workload.resource_version
        outcome = "expired"
        try:
            while outcome == "expired" and (remaining := following.until - self.clock.now()) > 0:
                opened = self.clock.now()
                self.streams_opened += 1
                events = following.client.watch(
                    workload.resource,
                    workload.namespace,
                    resource_version=version,
                    field_selector=f"metadata.name={workload.name}",
                    timeout_seconds=max(1, math.ceil(remaining)),
                    allow_bookmarks=False,
                )
                async with contextlib.aclosing(events):
                    async for event in events:
                        if event.type == "ERROR":
                            outcome = "failed"
                        elif event.type == "DELETED":
                            outcome = "gone"
                        elif turned(event.object):
                            outcome = "turned"
                        else:
                            version = str(
                                (event.object.get("metadata") or {}).get("resourceVersion") or version
                            )
                            continue
                        break
                if outcome == "expired" and self.clock.now() - opened < _SHORTEST_STREAM:
                    outcome = "failed"  # ended at once, not by its timeout: not opened again
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the poll still runs: a failed watch only loses the shortcut
            where = f"{workload.namespace}/{workload.name}"
            log.debug("watch of %s for Manifest %s failed: %s", where, request, exc)
            outcome = "failed"
        if self._following.get(request) is not following:
            return
        self._end(request, outcome)
        if outcome in ("turned", "gone") and self._queue is not None:
            self._queue.add(request, ManifestTrigger.WORKLOAD_TURNED)


def _same_object(a: Workload, b: Workload) -> bool:
    return (a.resource, a.namespace, a.name) == (b.resource, b.namespace, b.name)
