"""Reconciles one Manifest: install a module into its runtime, keep it there, uninstall it.

Install (upstream §4.3, step numbers in brackets):

1. Read the Manifest from the informer cache; gone -> done. Deleting -> uninstall (below).
2. ``operator.kyma-project.io/skip-reconciliation=true`` -> look again later, write nothing (1).
3. Finalizers ``declarative.kyma-project.io/finalizer`` and ``label-removal-finalizer`` (6).
4. The runtime's client through the Kyma's access Secret (3); unmanaged -> unmanage flow (4);
   the parent Kyma must exist (5, "orphaned manifest").
5. Fetch the raw manifest from the source (7), render it (9). Any failure here is an Error that
   names the module, the digest and the cause, and changes nothing in the runtime.
6. Apply (11): CRDs first and Established, then the rest; only drifted objects are written.
7. Prune ``synced - target`` in two phases (10), but with the same OCI ref as the one the synced
   list belongs to (``status.syncedRef``, ours) -> Warning and nothing deleted. We prune *after*
   applying, so an upgrade never removes the old version before the new one is in place.
8. Default CR (12, 13), readiness (14), ``sync-oci-ref`` (8, 15), status only on change (16).

The same-layer guard of step 7 must hold under any interleaving of our writes and of the informer's
events: the spec's new reference, the ``sync-oci-ref`` annotation (metadata) and the status are
separate writes, and a reconcile may read a Manifest carrying the new reference beside the old
version's ``synced``. Upstream's annotation says which layer was *applied*, not which layer the
``synced`` list describes; comparing against it made such a read "same layer, diff detected" and
the merged list stuck the module in Warning for good. So the reference is recorded in the status
(``syncedRef``), in the very write that records its list: only a list written for this reference
can trigger the guard. ``syncedRef`` is written only when ``synced`` is exactly its rendering (a
prune still under way keeps the previous one).

Uninstall (§4.4) and unmanage: ``uninstall``. The collaborators and the KCP writes: ``base``.

Events can overtake their write: the runtime agent reports a change from a *validating admission*
call, before the API server stores it, so the reconcile it triggers may still see the old object.
A reconcile woken by a runtime event that wrote nothing therefore looks again after each of
``event_settle_delays`` (30 ms, then 0.1 s, then 1 s: a write is usually stored within the first,
the others cover a slow API server), stopping as soon as one of them repairs something
(``common.settle``, scheduled in the Manifest's memory). The first look was 0.1 s until 2026-11-30:
a module's rollout (its Deployment's last status write) then reached the Manifest's ``Ready`` in
117 ms at p50, 69 ms with the 30 ms look (``benchmarks/results/enable_steps.md``), for one more
cheap re-read per event burst.

Requeue: Ready -> adaptive safety net (long while the runtime's agent sends heartbeats, since its
events report drift at once; upstream's 5 min otherwise); Processing -> short poll, and a watch of
the rolling-out workload that wakes the Manifest when it turns (``workloads``); waiting for the
runtime to remove something (uninstall, prune of an upgrade) -> 0.2 s, doubling up to 1 s;
Warning -> 30 s; Error -> rate-limited backoff. Events (the runtime agent names the owning
Manifest of a changed module object) enqueue at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.manifest import Manifest, SyncedResource
from kyma_operator.api.meta import InvalidObjectError, State
from kyma_operator.controllers.common.heartbeat import AgentHealth
from kyma_operator.controllers.manifest import defaultcr
from kyma_operator.controllers.manifest import status as st
from kyma_operator.controllers.manifest.apply import Applier, ApplyError, synced_id
from kyma_operator.controllers.manifest.base import (
    KYMA_CACHE_KEY_LOCAL,
    MANIFESTS,
    ManifestChanged,
    removal_delay,
)
from kyma_operator.controllers.manifest.config import ManifestControllerConfig
from kyma_operator.controllers.manifest.discovery import Discovery, UnknownKind
from kyma_operator.controllers.manifest.prune import Pruner, prune_candidates
from kyma_operator.controllers.manifest.readiness import Readiness, module_readiness
from kyma_operator.controllers.manifest.rendering import RenderFailed
from kyma_operator.controllers.manifest.report import CHANGED_OUTCOME, ManifestReport
from kyma_operator.controllers.manifest.report import Collector as _Report
from kyma_operator.controllers.manifest.requeuereasons import requeue_reasons
from kyma_operator.controllers.manifest.source import SourceError, describe_source
from kyma_operator.controllers.manifest.triggers import ManifestTrigger
from kyma_operator.controllers.manifest.uninstall import ManifestUninstall
from kyma_operator.controllers.manifest.workloads import Workload
from kyma_operator.remote.errors import SkrAccessError, is_connection_error
from kyma_operator.runtime.controller import TerminalError
from kyma_operator.runtime.errors import KubeError
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import PODS
from kyma_operator.runtime.triggers import current_triggers

__all__ = [
    "KYMA_CACHE_KEY_LOCAL",
    "MANIFESTS",
    "ManifestControllerConfig",
    "ManifestReconciler",
    "ManifestReport",
    "ready_interval",
    "removal_delay",
]

log = logging.getLogger(__name__)

_SETTLED = frozenset({State.READY.value, State.PROCESSING.value, State.WARNING.value})


class ManifestReconciler(ManifestUninstall):
    # -- entry point -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        report = _Report(request, current_triggers(), self.clock.now())
        adds_finalizer = _lacks_finalizer(self.manifests.get(request.namespace, request.name))
        try:
            result = await self._reconcile(request, report)
        except Exception as exc:
            if not report.outcome:
                report.set(State.ERROR.value, f"{type(exc).__name__}: {exc} (retrying with backoff)")
            self.metrics.requeue(requeue_reasons(report, Result(requeue=True), added_finalizer=False))
            raise
        else:
            self.metrics.requeue(requeue_reasons(report, result, added_finalizer=adds_finalizer))
            return result
        finally:
            if report.outcome != State.PROCESSING.value:
                self.workloads.leave(request)
            if report.outcome:
                done = report.freeze(self.clock.now())
                log.info("%s", done.line())
                for observer in self.observers:
                    observer(done)

    async def _reconcile(self, request: Request, report: _Report) -> Result:
        memory = self.memories.get(request)
        woken_by_event = ManifestTrigger.RUNTIME_EVENT in ManifestTrigger.of(report.triggers)
        look = (
            memory.settle.look(woken_by_event, self.clock.now())
            if memory is not None
            else (0 if woken_by_event else None)
        )
        if look and ManifestTrigger.RUNTIME_EVENT_REREAD not in report.triggers:
            report.triggers = (*report.triggers, ManifestTrigger.RUNTIME_EVENT_REREAD)
        try:
            result = await self._reconcile_once(request, report)
        finally:
            if not report.waiting_removal and memory is not None:
                memory.removal_waits = 0
        if look is None or report.outcome in ("gone", "deleted"):
            return result
        found_nothing = not report.applied and report.outcome in _SETTLED
        delays = self.config.event_settle_delays
        if not found_nothing and self.memories.get(request) is None:
            return result
        delay = self.memories[request].settle.after(look, found_nothing, delays, self.clock.now())
        if delay is None:
            return result
        self.settle_rereads += 1
        if result.requeue_after is None or result.requeue_after > delay:
            return Result(requeue_after=delay, reason=ManifestTrigger.RUNTIME_EVENT_REREAD)
        return result

    async def _reconcile_once(self, request: Request, report: _Report) -> Result:
        obj = self.manifests.get(request.namespace, request.name)
        if obj is None:
            self.memories.forget(request)
            report.set("gone", "no such Manifest")
            return Result()
        try:
            manifest = Manifest.from_object(obj)
        except InvalidObjectError as exc:
            report.set(State.ERROR.value, str(exc))
            raise TerminalError(str(exc)) from exc
        if manifest.is_deleting():
            return await self._delete(manifest, request, report)
        if manifest.skip_reconciliation():
            report.set("skipped", f"label {names.SKIP_RECONCILIATION_LABEL}=true")
            return Result(requeue_after=self.config.skip_interval)
        try:
            manifest = await self._ensure_finalizers(manifest)
        except ManifestChanged as exc:
            return self._changed(report, exc)
        try:
            skr, key = await self._runtime(manifest)
        except SkrAccessError as exc:
            return await self._fail(manifest, report, f"cannot reach the runtime: {exc.message}")
        if manifest.is_unmanaged():
            return await self._unmanage(manifest, skr, report)
        kyma = self._kyma(manifest)
        if kyma is None:
            return await self._fail(
                manifest,
                report,
                f"orphaned manifest detected: Kyma {manifest.namespace}/{manifest.kyma_name()} not found",
            )
        try:
            return await self._install(manifest, kyma, skr, key, report)
        except ManifestChanged as exc:
            return self._changed(report, exc)
        except KubeError as exc:
            if is_connection_error(exc) and key != KYMA_CACHE_KEY_LOCAL:
                await self.skr_clients.evict_on_error(key, exc)
            return await self._fail(manifest, report, f"runtime API: {exc}")

    @staticmethod
    def _changed(report: _Report, exc: ManifestChanged) -> Result:
        """The Manifest changed under this reconcile: no status written, run again on the new one."""
        report.set(CHANGED_OUTCOME, str(exc))
        return Result(requeue=True)

    # -- install ---------------------------------------------------------------------------------

    async def _install(
        self, manifest: Manifest, kyma: Kyma, skr: KubeClient, key: Request, report: _Report
    ) -> Result:
        discovery = self.discoveries.for_client(key, skr)
        what = describe_source(manifest)
        try:
            raw = await self.source.fetch(manifest)
        except SourceError as exc:
            return await self._fail(manifest, report, exc.message)
        try:
            objects = await self._render(manifest, raw, what)
        except RenderFailed as exc:
            return await self._fail(manifest, report, exc.message)
        resources = (True, f"{len(objects)} objects rendered from {what}")
        extra = [st.note_condition(note, self._now()) for note in raw.notes]
        # a runtime event reports a change just made: its reconcile reads consistently (ListVersions)
        woken_by_event = ManifestTrigger.RUNTIME_EVENT in ManifestTrigger.of(report.triggers)
        versions = self.memories[report.request].list_versions
        applier = Applier.configured(
            skr, discovery, self.config, self.clock, versions, consistent_lists=woken_by_event
        )
        synced = list(manifest.status.synced) if manifest.status else []
        ref = raw.digest
        # the guard compares with the reference the synced list itself records (one status write
        # holds both): the spec, the annotation and the status are written one after the other, and
        # a reconcile can read any mix of them (see the module docstring)
        same_ref = manifest.status is not None and manifest.status.synced_ref == ref
        try:
            # a first install (nothing synced, no version recorded) skips the read before each apply;
            # a stale cache cannot make a known Manifest look fresh (the annotation comes first)
            fresh = not synced and names.SYNC_OCI_REF_ANNOTATION not in manifest.annotations
            applied = await applier.sync(objects, fresh=fresh, default_namespace=raw.default_namespace)
        except ApplyError as exc:
            target = _union(synced, [synced_id(o) for o in objects if o["metadata"].get("name")])
            mixed = st.MIXED if not same_ref else None
            message = f"{what}: apply failed: {exc}"
            return await self._fail(manifest, report, message, synced=target, synced_ref=mixed)
        report.applied.extend(applied.applied)
        self.metrics.applied(len(applied.applied), drift=same_ref and bool(synced))
        target = [synced_id(o) for o in objects]
        candidates = prune_candidates(synced, target, (names.SKR_NAMESPACE, self.config.sync_namespace))
        if candidates and same_ref:
            listed = ", ".join(c.id() for c in candidates[:5])
            message = (
                f"{what}: resource syncTarget diff detected but in same oci layer, "
                f"prevent sync resource to be deleted: {listed}"
            )
            outcome = st.Outcome(
                State.WARNING, message, resources=resources, synced=_union(synced, target), extra=extra
            )
            await self._write_status(manifest, outcome, report)
            report.set(State.WARNING.value, message)
            return Result(requeue_after=self.config.warning_interval)
        if candidates:
            pruner = Pruner(skr, discovery, concurrency=self.config.apply_concurrency)
            remaining = await pruner.delete(candidates)
            report.pruned.extend(pruner.deleted)
            self.metrics.pruned(len(pruner.deleted))
            if remaining:
                # every candidate not seen gone stays listed, also those of a later phase not tried yet
                keep = [*target, *pruner.not_gone(candidates)]
                message = f"waiting for the removal of {', '.join(remaining[:5])}"
                outcome = st.Outcome(
                    State.PROCESSING,
                    message,
                    resources=resources,
                    synced=keep,
                    synced_ref=st.MIXED,
                    extra=extra,
                )
                await self._write_status(manifest, outcome, report)
                report.set(State.PROCESSING.value, message)
                return Result(requeue_after=self._removal_delay(report))
        module_cr = await self._ensure_default_cr(manifest, skr, discovery)
        if module_cr is not None and not module_cr[0]:
            outcome = st.Outcome(
                State.ERROR,
                module_cr[1],
                resources=resources,
                module_cr=module_cr,
                synced=target,
                synced_ref=ref,
                extra=extra,
            )
            await self._write_status(manifest, outcome, report)
            report.set(State.ERROR.value, module_cr[1])
            return Result(requeue=True)
        manifest = await self._ensure_meta(
            manifest,
            finalizers=(names.DEFAULT_CR_FINALIZER,) if module_cr is not None else (),
            annotations={names.SYNC_OCI_REF_ANNOTATION: ref} if not same_ref else {},
        )
        readiness = await module_readiness(applied.live, self._pod_lister(skr))
        outcome = st.Outcome(
            readiness.state,
            _operation(readiness),
            resources=resources,
            installation=(readiness.state is State.READY, readiness.message),
            module_cr=module_cr,
            synced=target,
            synced_ref=ref,
            extra=extra,
        )
        await self._write_status(manifest, outcome, report)
        report.set(readiness.state.value, readiness.message)
        if readiness.state is State.READY:
            return Result(requeue_after=self._ready_interval(kyma), periodic=True)
        if readiness.state is State.ERROR:
            return Result(requeue=True)
        workload = Workload.of(applied.live)
        if workload is not None:
            self.workloads.follow(Request(manifest.namespace, manifest.name), skr, workload)
        return Result(requeue_after=self.config.processing_interval)

    def _ready_interval(self, kyma: Kyma) -> float:
        return ready_interval(self.config, self.health, kyma.runtime_id())

    async def _ensure_default_cr(
        self, manifest: Manifest, skr: KubeClient, discovery: Discovery
    ) -> tuple[bool, str] | None:
        if not st.wants_module_cr(manifest):
            return None
        try:
            cr = await defaultcr.default_cr(manifest, discovery, self.config.sync_namespace)
        except (UnknownKind, defaultcr.DefaultCRError) as exc:
            return False, f"default CR cannot be created: {exc}"
        assert cr is not None
        if st.module_cr_ready(manifest.status):
            return True, f"default CR {cr.describe()} created"
        try:
            await defaultcr.ensure_created(skr, cr)
        except KubeError as exc:
            if is_connection_error(exc):
                raise
            return False, f"default CR {cr.describe()} cannot be created: {exc.reason}: {exc.message}"
        return True, f"default CR {cr.describe()} created"

    def _pod_lister(self, skr: KubeClient) -> Callable[[JSON], Any]:
        async def list_pods(statefulset: JSON) -> list[JSON]:
            selector = ((statefulset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            if not selector:
                return []
            query = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            namespace = (statefulset.get("metadata") or {}).get("namespace")
            return (await skr.list(PODS, namespace, label_selector=query)).items

        return list_pods

    # -- uninstall -------------------------------------------------------------------------------


def ready_interval(config: ManifestControllerConfig, health: AgentHealth, runtime_id: str) -> float:
    """The safety net of a Ready Manifest: long while its runtime's agent sends heartbeats (drift
    then arrives as events), upstream's 5 minutes otherwise."""
    return config.healthy_interval if health.healthy(runtime_id) else config.unhealthy_interval


def _lacks_finalizer(obj: JSON | None) -> bool:
    """A live Manifest without our finalizer: this reconcile adds it (upstream requeues then)."""
    if obj is None:
        return False
    meta = obj.get("metadata") or {}
    return not meta.get("deletionTimestamp") and names.MANIFEST_FINALIZER not in (
        meta.get("finalizers") or []
    )


def _union(first: Sequence[SyncedResource], second: Sequence[SyncedResource]) -> list[SyncedResource]:
    seen = {s.id() for s in first}
    return [*first, *(s for s in second if s.id() not in seen)]


def _operation(readiness: Readiness) -> str:
    if readiness.state is State.READY:
        return "resources are ready"
    return f"waiting for resources to become ready: {readiness.message}"
