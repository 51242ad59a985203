"""The leader's fleet-wide Kyma and Manifest informers for rollouts, holding only what rollouts read.

Why: with ``--sharding --shard-scoped-caches`` every replica's Kyma and Manifest caches hold only
its shards, but a rollout counts the whole fleet, so the leader lists and watches every Kyma and
Manifest a second time (``rollout-kymas``, ``rollout-manifests``, run only while it leads). Stored
as whole objects (``lean_object``) they cost the leader +245 MB at 5,000 Kymas x 5 modules, more
than an unsharded replica's whole cache (+171 MB; benchmarks/results/scale.md), which kept scoped
caches off by default. Their readers read a dozen fields, so these two informers store a projection
(a cache transform, like controller-runtime's ``TransformFunc``) with those fields alone:

* the informer itself: ``metadata.name``/``namespace`` (the key), ``resourceVersion`` (a relist's
  diff);
* ``controller.members_of`` and ``classify.observe``: a Kyma's name, labels (all: a wave selector
  may match any label), ``deletionTimestamp`` and the ``maintenance`` flag of its
  ``status.modules[]`` entries; a Manifest's module/channel/mandatory/Kyma labels,
  ``deletionTimestamp``, ``generation``, ``spec.version``, ``status.state``,
  ``status.observedGeneration`` and ``status.lastOperation.operation``;
* ``starter.installed_below``: a Manifest's module/channel/mandatory labels and ``spec.version``;
* ``sources.ManifestToRollout`` (``runs_for``, ``manifest_rollout_change``): a Manifest's rollout
  label and ``reverted-by`` annotation besides the above.

A Kyma's module entries are kept only when ``maintenance`` is set: ``observe`` reads an entry for
that flag alone, and a missing entry reads as "not waiting", like an entry without it. Every field
is named once, below; ``tests/unit/kyma_operator/rollouts/test_fleet_view.py`` checks that the
readers give the same answers over a whole object and over its projection. Nothing else may read
these informers: the Kyma controller's readers use the shared (shard) caches.

``FleetView`` runs the two informers only while rollouts need them: while a run is not finished
(``TERMINAL_PHASES``), or for ``IDLE_GRACE`` after the starter last asked (``demand``: a channel
moved under a policy and it must count what is installed below). Why: most of the time no run is
going, yet the projected view of 5,000 Kymas x 5 modules made the leader of three scoped
replicas the one above its share (+102 MB for 6 of 16 shards, the others +53-60 MB for 5;
benchmarks/results/scale.md). Stopped, the informers drop their caches (``Informer.reset``); the
next start lists the fleet again, as a new leader does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.modulerollout import TERMINAL_PHASES
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.runtime.clock import Clock, RealClock, TimerHandle
from kyma_operator.runtime.informer import FuncHandler, Informer, lean_object
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.streamedlists import StreamedLists

log = logging.getLogger(__name__)

KYMAS_INFORMER = "rollout-kymas"
MANIFESTS_INFORMER = "rollout-manifests"

META_FIELDS = ("name", "namespace", "resourceVersion", "deletionTimestamp")
"""Kept of every object's ``metadata``."""
MANIFEST_META_FIELDS = (*META_FIELDS, "generation")
MANIFEST_LABELS = (
    names.MODULE_NAME_LABEL,
    names.CHANNEL_LABEL,
    names.MANDATORY_MODULE_LABEL,
    names.KYMA_NAME_LABEL,
    names.ROLLOUT_LABEL,
)
MANIFEST_ANNOTATIONS = (names.REVERTED_BY_ANNOTATION,)
MANIFEST_STATUS_FIELDS = ("state", "observedGeneration")
MODULE_ENTRY_FIELDS = ("name", "maintenance")
"""Kept of a Kyma's ``status.modules[]`` entry (only entries with ``maintenance`` set)."""


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _pick(source: Mapping[str, Any], keys: Iterable[str]) -> JSON:
    return {key: source[key] for key in keys if source.get(key) is not None}


def _meta(obj: Mapping[str, Any], fields: Iterable[str]) -> JSON:
    return _pick(_dict(obj.get("metadata")), fields)


def rollout_kyma(obj: JSON) -> JSON:
    """Cache transform of ``rollout-kymas``: the Kyma as rollouts read it (module docstring)."""
    meta = _meta(obj, META_FIELDS)
    labels = _dict(_dict(obj.get("metadata")).get("labels"))
    if labels:
        meta["labels"] = dict(labels)
    view: JSON = {"metadata": meta}
    modules = _dict(obj.get("status")).get("modules")
    waiting = [
        _pick(entry, MODULE_ENTRY_FIELDS)
        for entry in (modules if isinstance(modules, list) else [])
        if isinstance(entry, dict) and entry.get("maintenance")
    ]
    if waiting:
        view["status"] = {"modules": waiting}
    projected: JSON = lean_object(view)
    return projected


def rollout_manifest(obj: JSON) -> JSON:
    """Cache transform of ``rollout-manifests``: the Manifest as rollouts read it (module docstring)."""
    source = _dict(obj.get("metadata"))
    meta = _meta(obj, MANIFEST_META_FIELDS)
    labels = _pick(_dict(source.get("labels")), MANIFEST_LABELS)
    if labels:
        meta["labels"] = labels
    annotations = _pick(_dict(source.get("annotations")), MANIFEST_ANNOTATIONS)
    if annotations:
        meta["annotations"] = annotations
    view: JSON = {"metadata": meta}
    version = _dict(obj.get("spec")).get("version")
    if version is not None:
        view["spec"] = {"version": version}
    raw_status = _dict(obj.get("status"))
    status = _pick(raw_status, MANIFEST_STATUS_FIELDS)
    operation = _dict(raw_status.get("lastOperation")).get("operation")
    if operation is not None:
        status["lastOperation"] = {"operation": operation}
    if status:
        view["status"] = status
    projected: JSON = lean_object(view)
    return projected


def fleet_informers(
    client: KubeClient, namespace: str, *, clock: Clock | None = None
) -> tuple[Informer, Informer]:
    """The leader's own fleet-wide Kyma and Manifest informers (run only while it leads), listing
    as watch streams from the API server's watch cache (``StreamedLists``: at 50,000 Kymas their
    paginated lists read 250,000 Manifests from etcd while every replica listed its shards)."""
    lists = StreamedLists(client, fallback="paginated")
    kymas = Informer(
        lists, KYMAS, namespace=namespace, clock=clock, name=KYMAS_INFORMER, transform=rollout_kyma
    )
    manifests = Informer(
        lists,
        MANIFESTS,
        namespace=namespace,
        clock=clock,
        name=MANIFESTS_INFORMER,
        transform=rollout_manifest,
    )
    return kymas, manifests


IDLE_GRACE = 600.0
"""Seconds the view keeps running after the last unfinished run was seen or the starter last asked:
a burst of channel moves (one per module release) lists the fleet once, not once per move."""


def _unfinished(run: Mapping[str, Any]) -> bool:
    return _dict(run.get("status")).get("phase") not in TERMINAL_PHASES


class FleetView:
    """Runs ``kymas`` and ``manifests`` (``fleet_informers``) only while rollouts need them (see the
    module docstring). A leader-only runnable: losing the lead stops and empties them too.
    ``on_running(bool)`` is told each start and stop (the ``fleet view running`` gauge)."""

    def __init__(
        self,
        kymas: Informer,
        manifests: Informer,
        runs: Informer,
        *,
        clock: Clock | None = None,
        idle_grace: float = IDLE_GRACE,
        on_running: Callable[[bool], None] | None = None,
    ) -> None:
        self.kymas = kymas
        self.manifests = manifests
        self._runs = runs
        self._clock = clock or RealClock()
        self.idle_grace = idle_grace
        self._on_running = on_running
        self._wake = asyncio.Event()
        self._needed_at: float | None = None
        """Clock seconds an unfinished run was last seen or the starter last asked."""
        self.starts = 0
        self.running = False
        self.decisions = 0
        """Times it decided whether to run (each wake-up): tests wait for a decision on a change."""
        runs.add_handler(FuncHandler(on_add=self._changed, on_update=self._updated, on_delete=self._changed))

    @property
    def informers(self) -> tuple[Informer, Informer]:
        return self.kymas, self.manifests

    def demand(self) -> None:
        """The starter needs the fleet's installed versions: run (on) for ``idle_grace`` from now."""
        self._needed_at = self._clock.now()
        self._wake.set()

    def _changed(self, _obj: Any) -> None:
        self._wake.set()

    def _updated(self, _old: Any, _new: Any) -> None:
        self._wake.set()

    def _idle_in(self, now: float) -> float:
        """Seconds until the view may stop (0: now)."""
        if any(_unfinished(run) for run in self._runs.list()):
            self._needed_at = now
        if self._needed_at is None:
            return 0.0
        return max(0.0, self._needed_at + self.idle_grace - now)

    async def run(self) -> None:
        tasks: list[asyncio.Task[None]] = []
        timer: TimerHandle | None = None
        try:
            while True:
                self._wake.clear()
                idle_in = self._idle_in(self._clock.now())
                self.decisions += 1
                if idle_in > 0 and not tasks:
                    tasks = [asyncio.create_task(i.run(), name=i.name) for i in self.informers]
                    self._running(True, "listing every Kyma and Manifest for rollouts")
                elif idle_in == 0 and tasks:
                    await self._stop(tasks, f"no unfinished run, no start asked for {self.idle_grace:.0f}s")
                    tasks = []
                if timer is not None:
                    timer.cancel()
                timer = self._clock.call_later(idle_in, self._wake.set) if idle_in > 0 else None
                await self._wake.wait()
        finally:
            if timer is not None:
                timer.cancel()
            if tasks:
                await self._stop(tasks, "no longer leading")

    def _running(self, running: bool, why: str) -> None:
        self.running = running
        if running:
            self.starts += 1
        log.info("rollout fleet view %s: %s", "started" if running else "stopped", why)
        if self._on_running is not None:
            self._on_running(running)

    async def _stop(self, tasks: list[asyncio.Task[None]], why: str) -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for informer in self.informers:
            informer.reset()
        self._running(False, why)
