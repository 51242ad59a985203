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
7. Prune ``synced - target`` in two phases (10), but with the same OCI ref as last synced
   (annotation ``sync-oci-ref``) -> Warning and nothing deleted. We prune *after* applying, so an
   upgrade never removes the old version before the new one is in place.
8. Default CR (12, 13), readiness (14), ``sync-oci-ref`` (8, 15), status only on change (16).

Uninstall (§4.4): a runtime whose access Secret is gone, or that cannot be reached while its Kyma
is gone too -> drop every finalizer of ours (the runtime is gone, nothing to clean). Unmanaged ->
drop finalizers, leave the runtime alone. Else: module CRs block (``Deleting`` names them); the
default CR is deleted first; then every synced object is pruned (two phases); then the finalizers
go.

Events can overtake their write: the runtime agent reports a change from a *validating admission*
call, before the API server stores it, so the reconcile it triggers may still see the old object.
A reconcile woken by a runtime event that wrote nothing therefore looks again after each of
``event_settle_delays`` (0.1 s, then 1 s: a write is usually stored within the first, and the second
covers a slow API server), stopping as soon as one of them repairs something.

Requeue: Ready -> adaptive safety net (long while the runtime's agent sends heartbeats, since its
events report drift at once; upstream's 5 min otherwise); Processing -> short poll; waiting for the
runtime to remove something (uninstall, prune of an upgrade) -> 0.2 s, doubling up to 1 s;
Warning -> 30 s; Error -> rate-limited backoff. Events (the runtime agent names the owning
Manifest of a changed module object) enqueue at once.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma
from kyma_operator.api.manifest import Manifest, ManifestStatus, SyncedResource
from kyma_operator.api.meta import InvalidObjectError, State
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSource
from kyma_operator.controllers.manifest import defaultcr
from kyma_operator.controllers.manifest import status as st
from kyma_operator.controllers.manifest.apply import Applier, ApplyError, synced_id
from kyma_operator.controllers.manifest.discovery import Discovery, DiscoveryCache, UnknownKind
from kyma_operator.controllers.manifest.metrics import ManifestMetrics
from kyma_operator.controllers.manifest.prune import Pruner, prune_candidates
from kyma_operator.controllers.manifest.readiness import Readiness, module_readiness
from kyma_operator.controllers.manifest.render import RenderContext, RenderError, parse_documents, transform
from kyma_operator.controllers.manifest.source import ManifestSource, SourceError, describe_source
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.remote.errors import AccessSecretNotFound, SkrAccessError, is_connection_error
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.controller import TerminalError
from kyma_operator.runtime.errors import Conflict, KubeError, NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import PODS, Resource
from kyma_operator.runtime.triggers import current_triggers
from kyma_wire.events import DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS

log = logging.getLogger(__name__)

RUNTIME_EVENT = "runtime event"
RUNTIME_EVENT_REREAD = "runtime event, re-read"
RUNTIME_EVENT_TRIGGERS = (RUNTIME_EVENT, *(f"{RUNTIME_EVENT_REREAD} {n}" for n in (1, 2, 3)))
"""The trigger notes of an event and of the re-reads after it (one per ``event_settle_delays``)."""
_SETTLED = frozenset({State.READY.value, State.PROCESSING.value, State.WARNING.value})

JSON = dict[str, Any]

MANIFESTS = Resource(names.OPERATOR_GROUP, names.OPERATOR_VERSION, "manifests", "Manifest")
KYMA_CACHE_KEY_LOCAL = Request("", "<kcp>")
"""Discovery key of the KCP itself (Manifests with ``spec.remote: false``)."""


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class ManifestControllerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    """Default namespace of default CRs; never pruned."""
    workers: int = Field(default=4, ge=1, le=64)
    healthy_interval: float = Field(default=1800.0, gt=0)
    unhealthy_interval: float = Field(default=300.0, gt=0)
    processing_interval: float = Field(default=5.0, gt=0)
    removal_poll_initial: float = Field(default=0.2, gt=0)
    """First look again while waiting for the runtime to remove what was deleted (a Namespace, a
    CRD, a module CR): doubled on every further wait up to ``removal_poll_max``. Nothing in the
    runtime reports the moment such an object disappears (the namespace controller finalizes it
    without an admission call), so a short bounded backoff stands in for the event; a look costs
    one GET per object still there."""
    removal_poll_max: float = Field(default=1.0, gt=0)
    warning_interval: float = Field(default=30.0, gt=0)
    skip_interval: float = Field(default=300.0, gt=0)
    failure_base_delay: float = Field(default=5.0, gt=0)
    failure_max_delay: float = Field(default=30.0, gt=0)
    apply_concurrency: int = Field(default=8, ge=1, le=256)
    crd_established_timeout: float = Field(default=30.0, gt=0)
    heartbeat_max_silence: float = Field(default=DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS, gt=0)
    """Silence after which the runtime's agent counts as unhealthy (same value as the listener's)."""
    event_throttle_window: float = Field(default=0.5, ge=0)
    """Runtime events for one Manifest within this window become one trailing reconcile."""
    intake_capacity: int = Field(default=4096, ge=1)
    """Manifests the listener may have waiting in the queue before it answers 429."""
    event_settle_delays: tuple[float, ...] = Field(default=(0.1, 1.0), max_length=3)
    """Re-reads after a runtime event that found nothing to repair (see the module docstring)."""
    field_manager: str = Field(default=names.MANIFEST_APPLIER_FIELD_MANAGER, min_length=1)


@dataclass(frozen=True)
class ManifestReport:
    """What one reconcile did (logs, tests, benchmarks)."""

    request: Request
    triggers: tuple[str, ...]
    started: float
    outcome: str
    message: str
    applied: tuple[str, ...] = ()
    pruned: tuple[str, ...] = ()
    status_written: bool = False
    duration: float = 0.0

    def line(self) -> str:
        why = ", ".join(self.triggers) or "requeue"
        wrote = f"; applied {len(self.applied)}" if self.applied else ""
        pruned = f"; pruned {len(self.pruned)}" if self.pruned else ""
        written = "" if self.status_written else " (status unchanged)"
        head = f"reconcile Manifest {self.request} [{why}]"
        return f"{head}: {self.outcome}: {self.message}{wrote}{pruned}{written}"


@dataclass
class _Report:
    request: Request
    triggers: tuple[str, ...]
    started: float
    outcome: str = ""
    message: str = ""
    applied: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    status_written: bool = False
    waiting_removal: bool = False
    """The reconcile waits for the runtime to remove something (short backoff, see config)."""

    def set(self, outcome: str, message: str) -> None:
        self.outcome = outcome
        self.message = message

    def freeze(self, now: float) -> ManifestReport:
        return ManifestReport(
            self.request,
            self.triggers,
            self.started,
            self.outcome,
            self.message,
            tuple(self.applied),
            tuple(self.pruned),
            self.status_written,
            max(0.0, now - self.started),
        )


class ManifestReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        manifests: Informer,
        kymas: Informer,
        skr_clients: SkrClientCache,
        source: ManifestSource,
        config: ManifestControllerConfig | None = None,
        heartbeats: HeartbeatSource | None = None,
        metrics: ManifestMetrics | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self.client = client
        self.manifests = manifests
        self.kymas = kymas
        self.skr_clients = skr_clients
        self.source = source
        self.config = config or ManifestControllerConfig()
        self.metrics = metrics or ManifestMetrics()
        self.clock = clock or RealClock()
        self._now = wall_clock
        self.discoveries = DiscoveryCache()
        self.heartbeats = heartbeats
        """The listener's heartbeat tracker; without one every runtime counts as unhealthy."""
        self.observers: list[Callable[[ManifestReport], None]] = []
        self.status_writes = 0
        self.metadata_writes = 0
        self.settle_rereads = 0
        self._removal_waits: dict[Request, int] = {}
        """Consecutive reconciles of a Manifest that waited for a removal (the backoff step)."""

    # -- entry point -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        report = _Report(request, current_triggers(), self.clock.now())
        try:
            return await self._reconcile(request, report)
        except Exception as exc:
            if not report.outcome:
                report.set(State.ERROR.value, f"{type(exc).__name__}: {exc} (retrying with backoff)")
            raise
        finally:
            if report.outcome:
                done = report.freeze(self.clock.now())
                log.info("%s", done.line())
                for observer in self.observers:
                    observer(done)

    async def _reconcile(self, request: Request, report: _Report) -> Result:
        try:
            result = await self._reconcile_once(request, report)
        finally:
            if not report.waiting_removal:
                self._removal_waits.pop(request, None)
        step = _event_step(report.triggers)
        delays = self.config.event_settle_delays
        if step is not None and step < len(delays) and not report.applied and report.outcome in _SETTLED:
            self.settle_rereads += 1
            delay = delays[step]
            if result.requeue_after is None or result.requeue_after > delay:
                return Result(requeue_after=delay, reason=RUNTIME_EVENT_TRIGGERS[step + 1])
        return result

    async def _reconcile_once(self, request: Request, report: _Report) -> Result:
        obj = self.manifests.get(request.namespace, request.name)
        if obj is None:
            self.metrics.forget(request)
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
        manifest = await self._ensure_finalizers(manifest)
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
        except KubeError as exc:
            if is_connection_error(exc) and manifest.spec.remote:
                await self.skr_clients.evict_on_error(key, exc)
            return await self._fail(manifest, report, f"runtime API: {exc}")

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
            objects = transform(
                parse_documents(raw.text),
                RenderContext(manifest.namespace, manifest.name, tuple(manifest.spec.localized_images)),
            )
        except RenderError as exc:
            return await self._fail(manifest, report, f"{what}: raw manifest {raw.digest}: {exc}")
        resources = (True, f"{len(objects)} objects rendered from {what}")
        extra = [st.note_condition(note, self._now()) for note in raw.notes]
        applier = Applier(
            skr,
            discovery,
            field_manager=self.config.field_manager,
            concurrency=self.config.apply_concurrency,
            crd_timeout=self.config.crd_established_timeout,
            clock=self.clock,
        )
        synced = list(manifest.status.synced) if manifest.status else []
        ref = raw.digest
        same_ref = manifest.annotations.get(names.SYNC_OCI_REF_ANNOTATION) == ref
        try:
            # a first install (nothing synced, no version recorded) skips the read before each apply;
            # a stale cache cannot make a known Manifest look fresh (the annotation comes first)
            fresh = not synced and names.SYNC_OCI_REF_ANNOTATION not in manifest.annotations
            applied = await applier.sync(objects, fresh=fresh, default_namespace=raw.default_namespace)
        except ApplyError as exc:
            target = _union(synced, [synced_id(o) for o in objects if o["metadata"].get("name")])
            return await self._fail(manifest, report, f"{what}: apply failed: {exc}", synced=target)
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
                left = {c.id() for c in candidates if _describe_entry(c) in remaining}
                keep = [*target, *(c for c in candidates if c.id() in left)]
                message = f"waiting for the removal of {', '.join(remaining[:5])}"
                outcome = st.Outcome(State.PROCESSING, message, resources=resources, synced=keep, extra=extra)
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
            extra=extra,
        )
        await self._write_status(manifest, outcome, report)
        report.set(readiness.state.value, readiness.message)
        if readiness.state is State.READY:
            return Result(requeue_after=self._ready_interval(kyma))
        if readiness.state is State.ERROR:
            return Result(requeue=True)
        return Result(requeue_after=self.config.processing_interval)

    def _ready_interval(self, kyma: Kyma) -> float:
        return ready_interval(self.config, self.heartbeats, kyma.runtime_id())

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

    async def _delete(self, manifest: Manifest, request: Request, report: _Report) -> Result:
        ours = (names.MANIFEST_FINALIZER, names.LABEL_REMOVAL_FINALIZER, names.DEFAULT_CR_FINALIZER)
        if not any(f in manifest.metadata.finalizers for f in ours):
            report.set("deleted", "deleting; no finalizer of ours left")
            self.metrics.forget(request)
            return Result()
        try:
            skr, key = await self._runtime(manifest)
        except AccessSecretNotFound as exc:
            await self._drop_finalizers(manifest, ours)
            report.set("deleted", f"runtime gone ({exc.message}): finalizers removed, nothing uninstalled")
            self.metrics.forget(request)
            return Result()
        except SkrAccessError as exc:
            return await self._fail(
                manifest,
                report,
                f"cannot reach the runtime to uninstall: {exc.message}",
                state=State.DELETING,
            )
        if manifest.is_unmanaged():
            await self._drop_finalizers(manifest, ours)
            report.set("deleted", "unmanaged: finalizers removed, runtime resources left in place")
            self.metrics.forget(request)
            return Result()
        discovery = self.discoveries.for_client(key, skr)
        try:
            return await self._uninstall(manifest, skr, discovery, report, ours)
        except KubeError as exc:
            if is_connection_error(exc) and manifest.spec.remote:
                await self.skr_clients.evict_on_error(key, exc)
                if self._kyma(manifest) is None:
                    # the runtime cannot be reached and its Kyma is gone: it is being deprovisioned
                    await self._drop_finalizers(manifest, ours)
                    report.set("deleted", f"runtime unreachable and Kyma gone ({exc}): finalizers removed")
                    self.metrics.forget(request)
                    return Result()
            return await self._fail(manifest, report, f"uninstall: runtime API: {exc}", state=State.DELETING)

    async def _uninstall(
        self, manifest: Manifest, skr: KubeClient, discovery: Discovery, report: _Report, ours: Sequence[str]
    ) -> Result:
        blocking = await defaultcr.blocking_crs(skr, manifest, discovery, self.config.sync_namespace)
        if blocking:
            message = f"waiting for module CRs to be deleted: {', '.join(blocking[:10])}"
            return await self._deleting(manifest, report, message)
        if st.wants_module_cr(manifest):
            with contextlib.suppress(UnknownKind, defaultcr.DefaultCRError):
                cr = await defaultcr.default_cr(manifest, discovery, self.config.sync_namespace)
                if cr is not None and await defaultcr.delete_default(skr, cr):
                    return await self._deleting(
                        manifest, report, f"waiting for default CR {cr.describe()} to go"
                    )
        if names.DEFAULT_CR_FINALIZER in manifest.metadata.finalizers:
            manifest = await self._drop_finalizers(manifest, (names.DEFAULT_CR_FINALIZER,))
        synced = list(manifest.status.synced) if manifest.status else []
        candidates = prune_candidates(synced, (), (names.SKR_NAMESPACE, self.config.sync_namespace))
        pruner = Pruner(skr, discovery, concurrency=self.config.apply_concurrency)
        remaining = await pruner.delete(candidates)
        report.pruned.extend(pruner.deleted)
        self.metrics.pruned(len(pruner.deleted))
        if remaining:
            left = [c for c in candidates if _describe_entry(c) in remaining]
            return await self._deleting(
                manifest, report, f"waiting for the removal of {', '.join(remaining[:5])}", synced=left
            )
        with contextlib.suppress(NotFound):
            outcome = st.Outcome(State.DELETING, "all resources removed", synced=[])
            manifest = await self._write_status(manifest, outcome, report)
        foreign = [f for f in manifest.metadata.finalizers if f not in ours]
        await self._drop_finalizers(manifest, ours)
        self.metrics.forget(Request(manifest.namespace, manifest.name))
        if foreign:
            report.set(
                State.DELETING.value, f"uninstalled; waiting as other finalizers are present: {foreign}"
            )
        else:
            report.set("deleted", "uninstalled, finalizers removed")
        return Result()

    async def _deleting(
        self,
        manifest: Manifest,
        report: _Report,
        message: str,
        *,
        synced: Sequence[SyncedResource] | None = None,
    ) -> Result:
        outcome = st.Outcome(State.DELETING, message, synced=synced)
        with contextlib.suppress(NotFound):
            await self._write_status(manifest, outcome, report)
        report.set(State.DELETING.value, message)
        return Result(requeue_after=self._removal_delay(report))

    # -- unmanage --------------------------------------------------------------------------------

    async def _unmanage(self, manifest: Manifest, skr: KubeClient, report: _Report) -> Result:
        if names.LABEL_REMOVAL_FINALIZER in manifest.metadata.finalizers:
            key = self._runtime_key(manifest)
            discovery = self.discoveries.for_client(key, skr)
            synced = list(manifest.status.synced) if manifest.status else []
            for entry in synced:
                api_version = f"{entry.group}/{entry.version}" if entry.group else entry.version
                try:
                    resource = await discovery.resource(api_version, entry.kind)
                    await skr.patch(
                        resource,
                        entry.name,
                        {"metadata": {"labels": {names.MANAGED_BY_LABEL: None}}},
                        entry.namespace or None,
                    )
                except (UnknownKind, NotFound):
                    continue
            manifest = await self._drop_finalizers(manifest, (names.LABEL_REMOVAL_FINALIZER,))
        outcome = st.Outcome(
            State.UNMANAGED, "module unmanaged: resources left in the runtime without our label"
        )
        await self._write_status(manifest, outcome, report)
        report.set(State.UNMANAGED.value, outcome.operation)
        return Result(requeue_after=self.config.skip_interval)

    # -- helpers ---------------------------------------------------------------------------------

    def _kyma(self, manifest: Manifest) -> Kyma | None:
        name = manifest.kyma_name()
        obj = self.kymas.get(manifest.namespace, name) if name else None
        if obj is None:
            return None
        try:
            return Kyma.from_object(obj)
        except InvalidObjectError:
            return None

    def _runtime_key(self, manifest: Manifest) -> Request:
        if not manifest.spec.remote:
            return KYMA_CACHE_KEY_LOCAL
        return Request(manifest.namespace, manifest.kyma_name() or "")

    async def _runtime(self, manifest: Manifest) -> tuple[KubeClient, Request]:
        key = self._runtime_key(manifest)
        if not manifest.spec.remote:
            return self.client, key
        if not key.name:
            raise SkrAccessError(f"the Manifest has no label {names.KYMA_NAME_LABEL}")
        return await self.skr_clients.get(key), key

    async def _fail(
        self,
        manifest: Manifest,
        report: _Report,
        message: str,
        *,
        synced: Sequence[SyncedResource] | None = None,
        state: State = State.ERROR,
    ) -> Result:
        outcome = st.Outcome(state, message, synced=synced)
        with contextlib.suppress(NotFound):
            await self._write_status(manifest, outcome, report)
        report.set(state.value, message)
        if state is State.DELETING:
            return Result(requeue_after=self.config.processing_interval)
        return Result(requeue=True)

    async def _write_status(self, manifest: Manifest, outcome: st.Outcome, report: _Report) -> Manifest:
        """Patch the status if ``outcome`` changes it; returns the Manifest as it now is (a later
        metadata patch must carry the resourceVersion this write produced, or it conflicts)."""
        self.metrics.state(Request(manifest.namespace, manifest.name), outcome.state)
        desired = st.next_status(manifest, outcome, self._now())
        if desired is None:
            return manifest
        rv = manifest.metadata.resource_version
        try:
            written = await self._patch_status(manifest, desired, rv)
        except Conflict:
            fresh = Manifest.from_object(await self.client.get(MANIFESTS, manifest.name, manifest.namespace))
            desired = st.next_status(fresh, outcome, self._now())
            if desired is None:
                return fresh
            written = await self._patch_status(fresh, desired, fresh.metadata.resource_version)
        report.status_written = True
        return written

    async def _patch_status(self, manifest: Manifest, desired: ManifestStatus, rv: str | None) -> Manifest:
        patch = {"metadata": {"resourceVersion": rv}, "status": st.status_patch(desired)}
        updated = await self.client.patch_status(MANIFESTS, manifest.name, patch, manifest.namespace)
        self.status_writes += 1
        return Manifest.from_object(updated)

    def _removal_delay(self, report: _Report) -> float:
        """When to look again while the runtime removes something: ``removal_poll_initial``,
        doubled per consecutive wait of the same Manifest, at most ``removal_poll_max`` (and never
        beyond ``processing_interval``)."""
        report.waiting_removal = True
        step = self._removal_waits.get(report.request, 0)
        self._removal_waits[report.request] = step + 1
        cap = min(self.config.removal_poll_max, self.config.processing_interval)
        return removal_delay(step, self.config.removal_poll_initial, cap)

    async def _ensure_finalizers(self, manifest: Manifest) -> Manifest:
        return await self._ensure_meta(
            manifest, finalizers=(names.MANIFEST_FINALIZER, names.LABEL_REMOVAL_FINALIZER)
        )

    async def _ensure_meta(
        self, manifest: Manifest, *, finalizers: Sequence[str] = (), annotations: dict[str, str] | None = None
    ) -> Manifest:
        missing = [f for f in finalizers if f not in manifest.metadata.finalizers]
        changed = {k: v for k, v in (annotations or {}).items() if manifest.annotations.get(k) != v}
        if not missing and not changed:
            return manifest
        meta: JSON = {"resourceVersion": manifest.metadata.resource_version}
        if missing:
            meta["finalizers"] = [*manifest.metadata.finalizers, *missing]
        if changed:
            meta["annotations"] = changed
        return await self._patch_meta(manifest, meta)

    async def _drop_finalizers(self, manifest: Manifest, drop: Sequence[str]) -> Manifest:
        kept = [f for f in manifest.metadata.finalizers if f not in drop]
        if kept == manifest.metadata.finalizers:
            return manifest
        meta: JSON = {"resourceVersion": manifest.metadata.resource_version, "finalizers": kept}
        try:
            return await self._patch_meta(manifest, meta)
        except NotFound:
            return manifest
        except Conflict:  # another writer (a finalizer of someone else): once more on what is there
            try:
                fresh = Manifest.from_object(
                    await self.client.get(MANIFESTS, manifest.name, manifest.namespace)
                )
            except NotFound:
                return manifest
            kept = [f for f in fresh.metadata.finalizers if f not in drop]
            if kept == fresh.metadata.finalizers:
                return fresh
            meta = {"resourceVersion": fresh.metadata.resource_version, "finalizers": kept}
            try:
                return await self._patch_meta(fresh, meta)
            except NotFound:
                return fresh

    async def _patch_meta(self, manifest: Manifest, meta: JSON) -> Manifest:
        updated = await self.client.patch(
            MANIFESTS,
            manifest.name,
            {"metadata": meta},
            manifest.namespace,
            field_manager=self.config.field_manager,
        )
        self.metadata_writes += 1
        return Manifest.from_object(updated)


def ready_interval(
    config: ManifestControllerConfig, heartbeats: HeartbeatSource | None, runtime_id: str
) -> float:
    """The safety net of a Ready Manifest: long while its runtime's agent sends heartbeats (drift
    then arrives as events), upstream's 5 minutes otherwise."""
    healthy = (
        heartbeats is not None
        and bool(runtime_id)
        and heartbeats.is_healthy(runtime_id, config.heartbeat_max_silence)
    )
    return config.healthy_interval if healthy else config.unhealthy_interval


def removal_delay(step: int, initial: float, cap: float) -> float:
    """The ``step``-th look (from 0) at a removal still under way: ``initial`` doubled, at most
    ``cap``."""
    return min(cap, initial * 2.0 ** min(step, 32))


def _event_step(triggers: tuple[str, ...]) -> int | None:
    """0 for a reconcile woken by a runtime event, n after its n-th re-read, None otherwise."""
    steps = [i for i, name in enumerate(RUNTIME_EVENT_TRIGGERS) if name in triggers]
    return min(steps) if steps else None


def _union(first: Sequence[SyncedResource], second: Sequence[SyncedResource]) -> list[SyncedResource]:
    seen = {s.id() for s in first}
    return [*first, *(s for s in second if s.id() not in seen)]


def _describe_entry(entry: SyncedResource) -> str:
    where = f"{entry.namespace}/{entry.name}" if entry.namespace else entry.name
    return f"{entry.kind} {where}"


def _operation(readiness: Readiness) -> str:
    if readiness.state is State.READY:
        return "resources are ready"
    return f"waiting for resources to become ready: {readiness.message}"
