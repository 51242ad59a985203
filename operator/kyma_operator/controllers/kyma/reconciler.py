"""Reconciles one Kyma: the runtime's agent, its CRDs and catalog, its modules, its status.

Flow (upstream steps in brackets, see ``reference/upstream-kyma-manifest-controllers.md`` §3.2):

1. Read the Kyma from the informer cache; gone -> drop its runtime client and metrics, done (1).
2. Deleting -> the deletion flow below (3.4).
3. ``operator.kyma-project.io/skip-reconciliation=true`` -> look again in 5 minutes, write nothing (2).
4. Finalizer ``operator.kyma-project.io/Kyma`` and label ``managed-by=lifecycle-manager`` (7).
5. Single-cluster mode (label ``operator.kyma-project.io/sync=false``, see ``single_cluster``): the
   runtime is KCP itself; no access Secret, no runtime copy, no agent, no CRD or catalog sync; the
   KCP Kyma's own spec lists the modules and the Manifests install next to the operator.
6. Otherwise reach the runtime through its access Secret (3, 4): a missing, duplicated or broken
   Secret gives ``SKRWebhook`` False with a reason naming the problem, every module entry Error,
   state Error, retry with backoff (and at once when the Secret appears).
7. CRDs Kyma/ModuleTemplate/ModuleReleaseMeta into the runtime, written only on change
   (``runtimecrds``, condition ``CRDsSync``) (8); namespace and runtime Kyma copy with the sync
   metadata (``skrsync``) (6, 10).
8. Install / update the agent and map its readiness to ``SKRWebhook`` (12, SKR webhook part);
   ``SKRWatcherHeartbeat`` from the listener's heartbeat tracker (ours).
9. Module half (``modulesync``, with ``--kyma-modules``): the runtime Kyma's ``spec.modules`` /
   ``spec.channel`` resolve through the catalog to one Manifest per module, mandatory modules
   everywhere, ``status.modules`` and condition ``Modules`` from the Manifests; the runtime's
   catalog (``runtimecatalog``, condition ``ModuleCatalog``) (12).
10. State: Error > Warning > Processing > a condition not True > Ready (13; ``SKRWatcherHeartbeat``
    is informational). The KCP status is written only when it changed, then the runtime copy's
    status only when it differs from KCP's (14). Requeue: Ready -> 30 min while the agent sends
    heartbeats, 5 min otherwise (or earlier when a rotation is due); Processing -> the installer's
    readiness poll; Warning -> 30 s; Error -> backoff.

Deletion (3.4): status Deleting in KCP and in the runtime copy; every Manifest of the Kyma deleted
and awaited (their removal wakes the Kyma); then the agent and its credentials, the runtime
catalog, the runtime Kyma and our CRDs are removed and the finalizer is dropped. Runtime steps are
skipped when the runtime cannot be reached (no/invalid access Secret, 401, TLS or transport
failure), so a runtime that is gone never blocks the deletion.

Events can overtake their write: the agent sees a change in a *validating admission* call, before
the API server stores it, and answers and sends at once, so the reconcile may read the runtime
Kyma before the edit is visible. A reconcile woken by a runtime event that finds the runtime Kyma's
spec unchanged since the previous reconcile therefore looks again after ``event_settle_delay``
(once per such event; remembered per Kyma in memory, a digest per Kyma).

Not here (said in the issue notes): maintenance windows and the image pull Secret sync.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kyma_operator.api import names
from kyma_operator.api.kyma import KYMA_CONDITION_REASON, Kyma, KymaConditionType, KymaSpec, ModuleStatus
from kyma_operator.api.meta import Condition, ConditionStatus, InvalidObjectError, State, find_condition
from kyma_operator.api.resources import KYMAS, MANIFESTS
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.catalogtriggers import MANIFEST_CHANGED
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSource, ObservedHealth
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.metrics import INTENDED, UNEXPECTED, KymaMetrics
from kyma_operator.controllers.kyma.moduleresolution import NONE_CHANNEL, aggregate_state
from kyma_operator.controllers.kyma.modulesync import ModuleSync, ModuleSyncResult
from kyma_operator.controllers.kyma.runtimecatalog import RuntimeCatalogSync
from kyma_operator.controllers.kyma.runtimecrds import CrdSyncError, RuntimeCrdSync
from kyma_operator.controllers.kyma.skrsync import RemoteKyma, RemoteKymaSync, RemoteSyncError
from kyma_operator.controllers.kyma.triggers import RUNTIME_EVENT, RUNTIME_EVENT_REREADS
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.remote.errors import SkrAccessError
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.controller import TerminalError
from kyma_operator.runtime.errors import Conflict, KubeError, NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.triggers import current_triggers
from kyma_wire.events import DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS

log = logging.getLogger(__name__)

JSON = dict[str, Any]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def single_cluster(kyma: Kyma) -> bool:
    """Single-cluster mode: the Kyma's runtime is the control plane itself.

    Marker: label ``operator.kyma-project.io/sync=false`` on the Kyma (the label older upstream
    versions used to switch the remote sync off). No access Secret is needed or read.
    """
    return kyma.labels.get(names.SYNC_LABEL, "").lower() == names.DISABLE_LABEL_VALUE


class KymaControllerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    """Where Kymas and their access Secrets live (upstream: kcp-system)."""
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    """The runtime namespace of the Kyma copy and the agent (upstream ``--sync-namespace``)."""
    remote_kyma_name: str = Field(default=names.DEFAULT_REMOTE_KYMA_NAME, min_length=1)
    workers: int = Field(default=4, ge=1, le=64)
    modules: bool = True
    """Run the module half (``ModuleSync``): Manifests, ``status.modules``, the runtime catalog."""
    restricted_modules: tuple[str, ...] = ()
    """Modules whose ModuleReleaseMeta may restrict them to Kymas by ``kymaSelector``."""
    healthy_interval: float = Field(default=1800.0, gt=0)
    """Safety net for a Ready Kyma whose agent sends heartbeats (30 min)."""
    unhealthy_interval: float = Field(default=300.0, gt=0)
    """Safety net otherwise: upstream's ``--kyma-requeue-success-interval`` (5 min)."""
    warning_interval: float = Field(default=30.0, gt=0)
    """Requeue of a Kyma in Warning (upstream 30 s)."""
    deletion_interval: float = Field(default=5.0, gt=0)
    """Fallback poll while a deletion waits for Manifests (their removal wakes the Kyma at once)."""
    skip_interval: float = Field(default=300.0, gt=0)
    """Requeue of a Kyma labelled skip-reconciliation (upstream: 5 min)."""
    failure_base_delay: float = Field(default=5.0, gt=0)
    failure_max_delay: float = Field(default=30.0, gt=0)
    """Backoff of failed reconciles (upstream ``--failure-base-delay`` / ``--failure-max-delay``)."""
    event_settle_delays: tuple[float, ...] = (0.03, 0.5)
    """Re-reads when a runtime event arrived but the runtime Kyma looks unchanged (the event
    overtook its write; see the module docstring): a write lands within milliseconds, so the first
    re-read is early and the later ones cover a slow API server."""
    intake_capacity: int = Field(default=4096, ge=1)
    """Kymas that may wait in the queue before the listener's intake pushes back (429)."""
    event_throttle_window: float = Field(default=0.5, ge=0)
    """Runtime events for one Kyma within this window after a forward become one trailing reconcile."""
    heartbeat_sweep_interval: float = Field(default=30.0, gt=0)
    heartbeat_max_silence: float = Field(default=DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS, gt=0)
    """Silence after which the runtime's agent counts as unhealthy (same value as the listener's)."""
    module_rollout_max_delay: float = Field(default=300.0, ge=0)
    """Catalog changes reach the Kymas they concern spread over a random delay up to this (upstream
    ``--module-upgrade-rollout-max-delay``, 5 min); 0: at once."""
    field_manager: str = Field(default=names.FIELD_MANAGER, min_length=1)


@dataclass(frozen=True)
class ReconcileReport:
    """What one reconcile did; observers get one per reconcile (logs, local run, benchmarks)."""

    request: Request
    triggers: tuple[str, ...]
    started: float
    """``Clock.now()`` when the reconcile began."""
    outcome: str
    """A ``State`` value, or ``gone`` / ``deleted`` / ``skipped``."""
    message: str
    runtime_id: str = ""
    remote_spec: str = ""
    status_written: bool = False
    duration: float = 0.0
    modules: tuple[tuple[str, str], ...] = ()
    """(module, state) of ``status.modules`` as written (module half only)."""
    manifests_applied: tuple[str, ...] = ()
    manifests_deleted: tuple[str, ...] = ()

    def line(self) -> str:
        why = ", ".join(self.triggers) or "requeue"
        spec = f"; runtime Kyma {self.remote_spec}" if self.remote_spec else ""
        written = "" if self.status_written else " (status unchanged)"
        modules = ""
        if self.modules:
            modules = "; modules " + ", ".join(f"{m}={s}" for m, s in self.modules)
        writes = ""
        if self.manifests_applied or self.manifests_deleted:
            writes = (
                f"; Manifests applied {list(self.manifests_applied)} deleted {list(self.manifests_deleted)}"
            )
        return (
            f"reconcile Kyma {self.request} [{why}]: {self.outcome}: {self.message}"
            f"{spec}{modules}{writes}{written}"
        )


class KymaReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        kymas: Informer,
        skr_clients: SkrClientCache,
        installers: Installers,
        config: KymaControllerConfig | None = None,
        heartbeats: HeartbeatSource | None = None,
        observed_health: ObservedHealth | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
        modules: ModuleSync | None = None,
        catalog_sync: RuntimeCatalogSync | None = None,
        crds: RuntimeCrdSync | None = None,
        metrics: KymaMetrics | None = None,
    ) -> None:
        self.client = client
        self.modules = modules
        """The module half (Manifests, ``status.modules``); None: the watcher part only."""
        self.catalog_sync = catalog_sync
        """The runtime catalog (with the module half); None: no catalog in the runtimes."""
        self.crds = crds
        """Our CRDs into the runtime; None: the runtime is expected to serve them already."""
        self.metrics = metrics or KymaMetrics()
        self.kymas = kymas
        self.skr_clients = skr_clients
        self.installers = installers
        self.config = config or KymaControllerConfig()
        self.observed_health = observed_health if observed_health is not None else ObservedHealth()
        self.clock = clock or RealClock()
        self._now = wall_clock
        self.remote = RemoteKymaSync(
            sync_namespace=self.config.sync_namespace, remote_name=self.config.remote_kyma_name
        )
        self.heartbeats = heartbeats
        """The listener's heartbeat tracker; without one every runtime counts as unhealthy."""
        self.heartbeat_max_silence = self.config.heartbeat_max_silence
        self.observers: list[Callable[[ReconcileReport], None]] = []
        self.on_start: list[Callable[[Request, tuple[str, ...]], None]] = []
        """Called as a reconcile begins (benchmarks measure event -> reconcile start)."""
        self.status_writes = 0
        self.remote_status_writes = 0
        self._remote_specs: dict[Request, str] = {}
        """Digest of the runtime Kyma's spec as the last reconcile read it."""
        self.settle_rereads = 0
        self._fast: dict[Request, _FastPathState] = {}
        """What the last full reconcile of a Kyma saw of its runtime (for the modules-only path)."""
        self._remote_objects: dict[Request, RemoteKyma] = {}
        self._remote_written: dict[Request, str] = {}
        """Digest of the status last copied into each runtime Kyma (modules-only path)."""
        self._last_status: dict[Request, JSON] = {}
        """The KCP status as last written or found unchanged (copied into the runtime Kyma)."""

    def forget(self, request: Request) -> None:
        """Drop what this process remembers of a Kyma (gone, deleted, or its shard now held by
        another replica) and its metric series; its runtime client is evicted separately."""
        self.observed_health.forget(request)
        self._remote_specs.pop(request, None)
        self._fast.pop(request, None)
        self._remote_objects.pop(request, None)
        self._remote_written.pop(request, None)
        self._last_status.pop(request, None)
        self.metrics.forget(request)

    # -- entry point -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        started = self.clock.now()
        triggers = current_triggers()
        for callback in self.on_start:
            callback(request, triggers)
        report = _Report(request, triggers, started)
        try:
            result = await self._reconcile(request, report)
        except Exception as exc:
            if report.outcome != State.ERROR.value:
                report.set(State.ERROR.value, f"{type(exc).__name__}: {exc} (retrying with backoff)")
            self.metrics.requeue(report.requeue_reason or "kyma_reconcile_failed", UNEXPECTED)
            raise
        else:
            if result.requeue or result.requeue_after is not None:
                kind = UNEXPECTED if report.outcome == State.ERROR.value else INTENDED
                self.metrics.requeue(report.requeue_reason or _requeue_reason(report.outcome), kind)
            return result
        finally:
            if report.outcome:
                done = report.freeze(self.clock.now())
                log.info("%s", done.line())
                for observer in self.observers:
                    observer(done)

    async def _reconcile(self, request: Request, report: _Report) -> Result:
        obj = self.kymas.get(request.namespace, request.name)
        if obj is None:
            await self.skr_clients.evict(request, "kyma-gone")
            self.forget(request)
            report.set("gone", "no such Kyma (deleted, or not created yet)")
            return Result()
        try:
            kyma = Kyma.from_object(obj)
        except InvalidObjectError as exc:
            report.set(State.ERROR.value, str(exc))
            raise TerminalError(str(exc)) from exc
        report.runtime_id = kyma.runtime_id()
        if kyma.is_deleting():
            return await self._delete(kyma, request, report)
        if kyma.skip_reconciliation():
            report.set("skipped", f"label {names.SKIP_RECONCILIATION_LABEL}=true")
            return Result(requeue_after=self.config.skip_interval)
        rv = await self._ensure_finalizer(kyma)
        if single_cluster(kyma):
            return await self._apply_local(kyma, rv, report)
        fast = self._fast.get(request)
        if fast is not None and modules_only(report.triggers):
            return await self._apply_modules_only(kyma, request, rv, report, fast)
        return await self._apply(kyma, request, rv, report)

    # -- normal path -----------------------------------------------------------------------------

    async def _apply(self, kyma: Kyma, request: Request, rv: str, report: _Report) -> Result:
        now = self._now()
        heartbeat = self._heartbeat_condition(kyma, request, now)
        try:
            skr = await self.skr_clients.get(request)
        except SkrAccessError as exc:
            condition = st.unreachable_condition(exc.reason, f"cannot reach the runtime: {exc.message}", now)
            report.requeue_reason = "runtime_access"
            return await self._fail(kyma, rv, report, condition, heartbeat, exc.message)
        conditions: list[Condition] = list(heartbeat)
        try:
            if self.crds is not None:
                crds = await self.crds.sync(skr)
                conditions.append(st.crds_condition(True, crds.applied, "", now))
            remote = await self.remote.ensure(kyma, skr)
        except (KubeError, RemoteSyncError, CrdSyncError) as exc:
            evicted = await self.skr_clients.evict_on_error(request, exc)
            if isinstance(exc, CrdSyncError):
                reason, message = st.REASON_CRDS_SYNC_FAILED, f"syncing CRDs into the runtime failed: {exc}"
                conditions.append(st.crds_condition(False, [], str(exc), now))
            else:
                reason = st.REASON_RUNTIME_UNREACHABLE if evicted else st.REASON_RUNTIME_SYNC_FAILED
                where = f"{self.config.sync_namespace}/{self.config.remote_kyma_name}"
                message = f"syncing the runtime Kyma {where} failed: {exc}"
            condition = st.unreachable_condition(reason, message, now)
            report.requeue_reason = "crds_sync" if isinstance(exc, CrdSyncError) else "runtime_sync"
            return await self._fail(kyma, rv, report, condition, tuple(conditions), message)
        report.remote_spec = remote.describe_spec()
        settle_step = self._settle_step(request, remote, report.triggers)
        spec_source = {
            "channel": remote.spec.get("channel") or kyma.spec.channel,
            "modules": remote.spec.get("modules") or [],
        }
        # Manifests first: a module enabled in the runtime reaches KCP before the agent is checked
        modules_run = await self._run_modules(kyma, spec_source, now, report, remote=True)
        wrote = modules_run is None or modules_run.result is None or bool(report.applied or report.deleted)
        seen = self.modules.manifest_versions(kyma) if self.modules is not None else frozenset()
        agent = await self.installers.for_kyma(kyma.name).ensure(kyma, skr)
        state, webhook = st.webhook_condition(agent, now)
        conditions.insert(0, webhook)
        outcome = st.Outcome(state, tuple(conditions), _operation(state, agent.message))
        self._fast[request] = _FastPathState(spec_source, outcome, agent.requeue_after)
        if not wrote and self.modules is not None and self.modules.manifest_versions(kyma) != seen:
            # a Manifest changed while the runtime was checked (~100 ms): the status written below
            # shows it, instead of waiting for the modules-only reconcile queued behind this one
            # (not after writes of our own: their echo may not be in the cache yet)
            modules_run = await self._run_modules(kyma, spec_source, now, report, remote=True)
        if modules_run is not None:
            outcome = _with_modules(outcome, modules_run, now)
            outcome = await self._sync_catalog(kyma, skr, outcome, now, report)
        written = await self._write_status(kyma, rv, outcome, now, report)
        await self._sync_remote_status(kyma, request, remote, skr)
        self.metrics.record(kyma, outcome.state, _module_states(outcome), report.mandatory)
        report.set(outcome.state.value, f"{webhook.reason}: {webhook.message}", written)
        if outcome.state is State.ERROR:
            return Result(requeue=True)
        interval = self._interval(kyma, outcome.state)
        if agent.requeue_after is not None:
            interval = min(interval, max(1.0, agent.requeue_after))
        delays = self.config.event_settle_delays
        if settle_step is not None and settle_step < len(delays):
            self.settle_rereads += 1
            return Result(
                requeue_after=min(interval, delays[settle_step]), reason=RUNTIME_EVENT_REREADS[settle_step]
            )
        return Result(requeue_after=interval)

    async def _apply_modules_only(
        self, kyma: Kyma, request: Request, rv: str, report: _Report, fast: _FastPathState
    ) -> Result:
        """Only Manifests changed since the last full reconcile (their state, a deletion): the module
        half and the status, without re-checking the runtime's CRDs, agent and catalog (their own
        triggers and the safety net do that). Manifest state reaches the Kyma in one KCP write and at
        most one runtime write instead of a full runtime round."""
        now = self._now()
        modules_run = await self._run_modules(kyma, fast.spec_source, now, report, remote=True)
        outcome = fast.base
        catalog = find_condition(kyma.status.conditions, KymaConditionType.MODULE_CATALOG.value)
        if catalog is not None:
            failed = catalog.status is not ConditionStatus.TRUE
            outcome = st.Outcome(
                State.ERROR if failed else outcome.state,
                (*outcome.conditions, catalog),
                catalog.message if failed else outcome.operation,
            )
        if modules_run is not None:
            outcome = _with_modules(outcome, modules_run, now)
        written = await self._write_status(kyma, rv, outcome, now, report)
        remote = self._remote_objects.get(request)
        if remote is not None:
            try:
                skr = await self.skr_clients.get(request)
            except SkrAccessError:
                skr = None
            if skr is not None:
                await self._sync_remote_status(kyma, request, remote, skr, fresh=False)
        self.metrics.record(kyma, outcome.state, _module_states(outcome), report.mandatory)
        report.set(outcome.state.value, f"modules only: {outcome.operation}", written)
        if outcome.state is State.ERROR:
            return Result(requeue=True)
        interval = self._interval(kyma, outcome.state)
        if fast.agent_requeue is not None:
            interval = min(interval, max(1.0, fast.agent_requeue))
        pending = [i for i, name in enumerate(RUNTIME_EVENT_REREADS) if name in report.triggers]
        delays = self.config.event_settle_delays
        if pending and pending[0] < len(delays):
            # this reconcile took the reason of a re-read that is still scheduled: note it again
            step = pending[0]
            return Result(requeue_after=min(interval, delays[step]), reason=RUNTIME_EVENT_REREADS[step])
        return Result(requeue_after=interval)

    async def _apply_local(self, kyma: Kyma, rv: str, report: _Report) -> Result:
        """Single-cluster mode: modules from the KCP Kyma's own spec, installed next to the operator."""
        now = self._now()
        outcome = st.Outcome(State.READY, (), "kyma is ready")
        spec_source = {
            "channel": kyma.spec.channel,
            "modules": [m.model_dump(mode="json", by_alias=True) for m in kyma.spec.modules],
        }
        modules_run = await self._run_modules(kyma, spec_source, now, report, remote=False)
        if modules_run is not None:
            outcome = _with_modules(outcome, modules_run, now)
        written = await self._write_status(kyma, rv, outcome, now, report)
        self.metrics.record(kyma, outcome.state, _module_states(outcome), report.mandatory)
        report.set(outcome.state.value, f"single-cluster: {outcome.operation}", written)
        if outcome.state is State.ERROR:
            return Result(requeue=True)
        return Result(requeue_after=self._interval(kyma, outcome.state))

    def _interval(self, kyma: Kyma, state: State) -> float:
        if state is State.READY:
            healthy = self._healthy(kyma) or single_cluster(kyma)
            return self.config.healthy_interval if healthy else self.config.unhealthy_interval
        if state is State.WARNING:
            return min(self.config.warning_interval, self.config.unhealthy_interval)
        return self.config.unhealthy_interval

    async def _run_modules(
        self, kyma: Kyma, spec_source: JSON, now: datetime.datetime, report: _Report, *, remote: bool
    ) -> _ModulesRun | None:
        """The module half: the runtime Kyma's ``spec.modules``/``spec.channel`` (upstream: the SKR
        copy owns them) decide the Manifests. None without the module half."""
        if self.modules is None:
            return None
        try:
            spec = KymaSpec.model_validate(spec_source)
            if spec.channel == NONE_CHANNEL:
                raise ValueError(f"channel {NONE_CHANNEL!r} is not a channel a Kyma can follow")
        except (ValidationError, ValueError) as exc:
            detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            message = f"the runtime Kyma's spec is invalid: {detail}"
            bad = st.condition(KymaConditionType.MODULES.value, False, "InvalidSpec", message, now)
            return _ModulesRun(None, None, bad)
        result = await self.modules.sync(kyma.model_copy(update={"spec": spec}), remote=remote)
        report.applied.extend(result.applied)
        report.deleted.extend(result.deleted)
        report.mandatory = dict(result.mandatory)
        return _ModulesRun(spec, result, None)

    async def _sync_catalog(
        self, kyma: Kyma, skr: KubeClient, outcome: st.Outcome, now: datetime.datetime, report: _Report
    ) -> st.Outcome:
        if self.catalog_sync is None:
            return outcome
        try:
            result = await self.catalog_sync.sync(kyma, skr)
        except KubeError as exc:
            await self.skr_clients.evict_on_error(Request(kyma.namespace, kyma.name), exc)
            message = f"syncing the module catalog into the runtime failed: {exc}"
            condition = st.condition(
                KymaConditionType.MODULE_CATALOG.value, False, st.REASON_CATALOG_SYNC_FAILED, message, now
            )
            report.requeue_reason = "module_catalog_sync"
            return st.Outcome(
                State.ERROR,
                (*outcome.conditions, condition),
                message,
                outcome.modules,
                outcome.active_channel,
            )
        report.catalog_writes = len(result.applied) + len(result.deleted)
        condition = st.condition(
            KymaConditionType.MODULE_CATALOG.value,
            True,
            KYMA_CONDITION_REASON,
            "module catalog is in sync",
            now,
        )
        return st.Outcome(
            outcome.state,
            (*outcome.conditions, condition),
            outcome.operation,
            outcome.modules,
            outcome.active_channel,
        )

    async def _sync_remote_status(
        self, kyma: Kyma, request: Request, remote: RemoteKyma, skr: KubeClient, *, fresh: bool = True
    ) -> None:
        """Copy the KCP status into the runtime Kyma when it differs (upstream step 14).

        ``fresh``: ``remote`` was just read (compare with it); otherwise it is from an earlier
        reconcile and what this process wrote last is compared instead."""
        obj = self.kymas.get(kyma.namespace, kyma.name)
        latest = self._last_status.get(request)
        if latest is None and obj is not None:
            latest = (obj.get("status") or {}) if isinstance(obj.get("status"), dict) else {}
        if not latest:
            return
        digest = hashlib.sha256(json.dumps(latest, sort_keys=True, default=str).encode()).hexdigest()
        if not fresh and self._remote_written.get(request) == digest:
            return
        try:
            if await self.remote.sync_status(remote, latest, skr):
                self.remote_status_writes += 1
            self._remote_written[request] = digest
        except KubeError as exc:
            await self.skr_clients.evict_on_error(request, exc)
            log.info("Kyma %s: runtime status sync failed (next reconcile retries): %s", request, exc)

    def _settle_step(self, request: Request, remote: RemoteKyma, triggers: tuple[str, ...]) -> int | None:
        """Which re-read is due when a runtime event found the runtime Kyma's spec unchanged (the
        event overtook its write), or None. Also remembers the runtime Kyma for the fast path."""
        digest = hashlib.sha256(json.dumps(remote.spec, sort_keys=True).encode()).hexdigest()
        previous = self._remote_specs.get(request)
        self._remote_specs[request] = digest
        self._remote_objects[request] = remote
        if previous != digest or remote.created:
            return None
        if RUNTIME_EVENT in triggers:
            return 0
        for index, name in enumerate(RUNTIME_EVENT_REREADS):
            if name in triggers:
                return index + 1
        return None

    async def _fail(
        self,
        kyma: Kyma,
        rv: str,
        report: _Report,
        condition: Condition,
        heartbeat: tuple[Condition, ...],
        message: str,
    ) -> Result:
        """The runtime cannot be reached or prepared: Kyma Error, and (module half) every module
        entry Error too, since nothing about them can be known (upstream step 4)."""
        now = self._now()
        modules: tuple[ModuleStatus, ...] | None = None
        if self.modules is not None:
            modules = tuple(
                m.model_copy(update={"state": State.ERROR, "message": f"runtime unreachable: {message}"})
                for m in kyma.status.modules
            )
        outcome = st.Outcome(State.ERROR, (condition, *heartbeat), message, modules)
        written = await self._write_status(kyma, rv, outcome, now, report)
        self.metrics.record(kyma, State.ERROR, _module_states(outcome))
        report.set(State.ERROR.value, f"{condition.reason}: {condition.message}", written)
        return Result(requeue=True)

    def _healthy(self, kyma: Kyma) -> bool:
        runtime_id = kyma.runtime_id()
        return bool(
            self.heartbeats is not None
            and runtime_id
            and self.heartbeats.is_healthy(runtime_id, self.heartbeat_max_silence)
        )

    def _heartbeat_condition(
        self, kyma: Kyma, request: Request, now: datetime.datetime
    ) -> tuple[Condition, ...]:
        if self.heartbeats is None:
            return ()
        runtime_id = kyma.runtime_id()
        healthy = self._healthy(kyma)
        self.observed_health.record(request, healthy)
        ever_seen = bool(runtime_id) and self.heartbeats.last_seen(runtime_id) is not None
        return (
            st.heartbeat_condition(
                runtime_id,
                healthy=healthy,
                ever_seen=ever_seen,
                max_silence=self.heartbeat_max_silence,
                now=now,
            ),
        )

    async def _ensure_finalizer(self, kyma: Kyma) -> str:
        """Add finalizer and managed-by label if missing; returns the resourceVersion to write on."""
        rv = kyma.metadata.resource_version or ""
        finalizers = list(kyma.metadata.finalizers)
        needs_finalizer = (
            names.KYMA_FINALIZER not in finalizers and names.FOREGROUND_DELETION_FINALIZER not in finalizers
        )
        needs_label = kyma.labels.get(names.MANAGED_BY_LABEL) != names.OPERATOR_NAME
        if not needs_finalizer and not needs_label:
            return rv
        patch: JSON = {"metadata": {"resourceVersion": rv}}
        if needs_finalizer:
            patch["metadata"]["finalizers"] = [*finalizers, names.KYMA_FINALIZER]
        if needs_label:
            patch["metadata"]["labels"] = {names.MANAGED_BY_LABEL: names.OPERATOR_NAME}
        updated = await self.client.patch(
            KYMAS, kyma.name, patch, kyma.namespace, field_manager=self.config.field_manager
        )
        return str((updated.get("metadata") or {}).get("resourceVersion") or rv)

    async def _write_status(
        self, kyma: Kyma, rv: str, outcome: st.Outcome, now: datetime.datetime, report: _Report | None = None
    ) -> bool:
        """Patch the status subresource if ``outcome`` changes it; True if written.

        The cache may lag behind our own last write (e.g. the reconcile woken by our finalizer
        patch): on a conflict the Kyma is read once from the API and compared again.
        """
        request = Request(kyma.namespace, kyma.name)
        desired = st.next_status(kyma.status, outcome, now)
        if report is not None:
            report.modules = tuple((m.name, m.state.value) for m in (outcome.modules or ()))
        if desired is None:
            self._last_status[request] = st.status_patch(kyma.status)
            return False
        patch = {"metadata": {"resourceVersion": rv}, "status": st.status_patch(desired)}
        try:
            await self.client.patch_status(KYMAS, kyma.name, patch, kyma.namespace)
        except Conflict:
            fresh = Kyma.from_object(await self.client.get(KYMAS, kyma.name, kyma.namespace))
            desired = st.next_status(fresh.status, outcome, now)
            if desired is None:
                self._last_status[request] = st.status_patch(fresh.status)
                return False
            patch = {
                "metadata": {"resourceVersion": fresh.metadata.resource_version},
                "status": st.status_patch(desired),
            }
            await self.client.patch_status(KYMAS, kyma.name, patch, kyma.namespace)
        self._last_status[request] = st.status_patch(desired)
        self.status_writes += 1
        return True

    # -- deletion --------------------------------------------------------------------------------

    async def _delete(self, kyma: Kyma, request: Request, report: _Report) -> Result:
        if names.KYMA_FINALIZER not in kyma.metadata.finalizers:
            report.set("deleted", "deleting; no finalizer of ours left")
            return Result()
        now = self._now()
        rv = kyma.metadata.resource_version or ""
        local = single_cluster(kyma)
        skr = None if local else await self._reachable(request)
        if skr is not None and not await self._mark_remote_deleting(request, skr):
            skr = None  # the runtime does not answer: it is not waited for (see below)
        remaining = await self._delete_manifests(kyma) if self.modules is not None else []
        waiting = bool(remaining) and (local or skr is not None)
        message = (
            f"waiting for modules to be deleted: {', '.join(remaining[:5])}"
            if waiting
            else "waiting for the runtime to be cleaned up"
        )
        outcome = st.Outcome(State.DELETING, (), message, None)
        written = await self._write_status(kyma, rv, outcome, now, report)
        if waiting:
            report.set(State.DELETING.value, message, written)
            report.requeue_reason = "kyma_deletion"
            return Result(requeue_after=self.config.deletion_interval)
        # A runtime that cannot be reached does not block: its Manifests are deleted and, once this
        # Kyma is gone, the Manifest controller releases them without touching the runtime.
        skipped = ""
        if not local:
            skipped = await self._cleanup_runtime(kyma, request, skr)
        await self.skr_clients.evict(request, "kyma-deleted")
        self.forget(request)
        try:
            fresh = await self.client.get(KYMAS, kyma.name, kyma.namespace)
            meta = fresh.get("metadata") or {}
            finalizers = [f for f in meta.get("finalizers") or [] if f != names.KYMA_FINALIZER]
            await self.client.patch(
                KYMAS,
                kyma.name,
                {"metadata": {"resourceVersion": meta.get("resourceVersion"), "finalizers": finalizers}},
                kyma.namespace,
                field_manager=self.config.field_manager,
            )
        except NotFound:
            pass
        except Conflict:
            report.set(State.DELETING.value, "finalizer removal conflicted; retrying", written)
            return Result(requeue=True)
        report.set("deleted", f"modules and runtime cleaned up, finalizer dropped{skipped}", written)
        return Result()

    async def _delete_manifests(self, kyma: Kyma) -> list[str]:
        """Delete every Manifest of the Kyma (user and mandatory modules); names still present."""
        assert self.modules is not None
        remaining: list[str] = []
        for manifest, _ in self.modules.manifests_of(kyma):
            remaining.append(manifest.name)
            if manifest.metadata.deletion_timestamp is None:
                with contextlib.suppress(NotFound):
                    await self.client.delete(MANIFESTS, manifest.name, manifest.namespace)
        return remaining

    async def _mark_remote_deleting(self, request: Request, skr: KubeClient) -> bool:
        """Upstream step 2: the runtime copy shows Deleting, so module operators see deprovisioning.

        False when the runtime does not answer (401, TLS, transport): its client is evicted."""
        try:
            await skr.patch_status(
                KYMAS,
                self.config.remote_kyma_name,
                {"status": {"state": State.DELETING.value}},
                self.config.sync_namespace,
            )
        except NotFound:
            return True
        except KubeError as exc:
            return not await self.skr_clients.evict_on_error(request, exc)
        return True

    async def _cleanup_runtime(self, kyma: Kyma, request: Request, skr: KubeClient | None) -> str:
        """Agent, credentials, runtime catalog, runtime Kyma and CRDs; returns a note if skipped."""
        installer = self.installers.for_kyma(kyma.name)
        skipped = ""
        if skr is not None:
            try:
                await installer.remove(kyma, skr)
                if self.catalog_sync is not None:
                    await self.catalog_sync.remove(skr)
                await self._delete_remote_kyma(skr)
                if self.crds is not None:
                    await self.crds.remove(skr)
            except KubeError as exc:
                if not await self.skr_clients.evict_on_error(request, exc):
                    raise
                skipped = f" (runtime unreachable: {type(exc).__name__}; runtime part skipped)"
                skr = None
        if skr is None:
            await installer.remove(kyma, None)
            skipped = skipped or " (runtime unreachable; runtime part skipped)"
        return skipped

    async def _reachable(self, request: Request) -> KubeClient | None:
        try:
            return await self.skr_clients.get(request)
        except SkrAccessError as exc:
            log.info("Kyma %s is being deleted and its runtime cannot be reached: %s", request, exc.message)
            return None

    async def _delete_remote_kyma(self, skr: KubeClient) -> None:
        with contextlib.suppress(NotFound):
            await skr.delete(KYMAS, self.config.remote_kyma_name, self.config.sync_namespace)


@dataclass(frozen=True)
class _FastPathState:
    """From a Kyma's last full reconcile: the runtime's spec.modules/channel and the outcome of
    everything but the modules (agent, CRDs, heartbeat), reused while only Manifests change."""

    spec_source: JSON
    base: st.Outcome
    agent_requeue: float | None


@dataclass(frozen=True)
class _ModulesRun:
    spec: KymaSpec | None
    result: ModuleSyncResult | None
    invalid: Condition | None
    """Condition ``Modules`` False when the runtime Kyma's spec is invalid (then no result)."""


def _with_modules(outcome: st.Outcome, run: _ModulesRun, now: datetime.datetime) -> st.Outcome:
    """``outcome`` with the modules' entries, condition ``Modules`` and the aggregated state
    (Error > Warning > Processing > a condition not True > Ready; the heartbeat is informational)."""
    if run.invalid is not None or run.result is None or run.spec is None:
        bad = run.invalid
        assert bad is not None
        return st.Outcome(State.ERROR, (*outcome.conditions, bad), _operation(State.ERROR, bad.message))
    result = run.result
    failing = [m.name for m in result.modules if m.state not in (State.READY, State.UNMANAGED)]
    modules_condition = st.condition(
        KymaConditionType.MODULES.value,
        not failing,
        KYMA_CONDITION_REASON,
        "all modules are Ready" if not failing else f"modules not Ready: {', '.join(sorted(failing))}",
        now,
    )
    conditions = (*outcome.conditions, modules_condition)
    module_states = [m.state for m in result.modules]
    if outcome.state in (State.ERROR, State.WARNING, State.PROCESSING):
        module_states.append(outcome.state)
    gating = [c for c in conditions if c.type != st.WATCHER_HEARTBEAT]
    state = aggregate_state(module_states, gating)
    operation = "waiting for all modules to become ready" if failing else modules_condition.message
    if outcome.state in (State.ERROR, State.PROCESSING) and not failing and state is not State.READY:
        operation = outcome.operation
    return st.Outcome(
        state,
        conditions,
        _operation(state, operation),
        tuple(result.modules),
        active_channel=run.spec.channel if state in (State.READY, State.WARNING) else None,
    )


def modules_only(triggers: tuple[str, ...]) -> bool:
    """Woken by Manifest changes alone (the modules-only path applies).

    A runtime event's re-reads are scheduled with their reason noted at once, so a Manifest change
    that arrives before a re-read is due takes that reason too. The first re-read (30 ms) looks for
    a runtime write the event overtook: a Manifest change before it goes the full way (it reads the
    runtime). The later ones only cover a slow API server: a Manifest change before them goes the
    modules-only way, and the re-read itself stays in the queue and runs the full reconcile when due
    (``_apply_modules_only`` notes its reason again). Without this, a Manifest state change in the
    second after a runtime event paid a full runtime round (~100 ms), and the re-read then ran
    without knowing it was one.
    """
    others = set(triggers) - {MANIFEST_CHANGED}
    return MANIFEST_CHANGED in triggers and others <= set(RUNTIME_EVENT_REREADS[1:])


def _module_states(outcome: st.Outcome) -> list[tuple[str, State]] | None:
    if outcome.modules is None:
        return None
    return [(m.name, m.state) for m in outcome.modules]


def _requeue_reason(outcome: str) -> str:
    return {
        State.READY.value: "kyma_ready_safety_net",
        State.PROCESSING.value: "kyma_processing",
        State.WARNING.value: "kyma_warning",
        State.ERROR.value: "kyma_error",
        "skipped": "kyma_skip_reconciliation",
    }.get(outcome, "kyma_requeue")


def _operation(state: State, message: str) -> str:
    if state is State.READY:
        return "kyma is ready"
    return message


class _Report:
    """Mutable collector for one ``ReconcileReport``."""

    def __init__(self, request: Request, triggers: tuple[str, ...], started: float) -> None:
        self.request = request
        self.triggers = triggers
        self.started = started
        self.outcome = ""
        self.message = ""
        self.runtime_id = ""
        self.remote_spec = ""
        self.status_written = False
        self.requeue_reason = ""
        self.modules: tuple[tuple[str, str], ...] = ()
        self.applied: list[str] = []
        self.deleted: list[str] = []
        self.mandatory: dict[str, State] | None = None
        self.catalog_writes = 0

    def set(self, outcome: str, message: str, status_written: bool = False) -> None:
        self.outcome = outcome
        self.message = message
        self.status_written = status_written

    def freeze(self, now: float) -> ReconcileReport:
        return ReconcileReport(
            request=self.request,
            triggers=self.triggers,
            started=self.started,
            outcome=self.outcome,
            message=self.message,
            runtime_id=self.runtime_id,
            remote_spec=self.remote_spec,
            status_written=self.status_written,
            duration=max(0.0, now - self.started),
            modules=self.modules,
            manifests_applied=tuple(self.applied),
            manifests_deleted=tuple(self.deleted),
        )
