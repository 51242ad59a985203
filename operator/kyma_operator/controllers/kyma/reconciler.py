"""Reconciles one Kyma: the part of upstream's Kyma reconcile that the watcher mechanism needs.

Flow (upstream steps in brackets, see ``reference/upstream-kyma-manifest-controllers.md`` §3.2):

1. Read the Kyma from the informer cache; gone -> drop its runtime client, done (1).
2. Deleting -> status ``Deleting``; remove the agent from the runtime (webhook first) and its KCP
   certificates and keys, delete the runtime's Kyma copy, drop the finalizer. The runtime part is
   skipped when the runtime cannot be reached (no/invalid access Secret, 401, TLS or transport
   failure) (3.4).
3. ``operator.kyma-project.io/skip-reconciliation=true`` -> look again in 5 minutes, write nothing (2).
4. Finalizer ``operator.kyma-project.io/Kyma`` and label ``managed-by=lifecycle-manager`` (7).
5. Reach the runtime through its access Secret (3, 4): a missing, duplicated or broken Secret gives
   ``SKRWebhook`` False with a reason naming the problem, state Error, retry with backoff.
6. Namespace and runtime Kyma copy with the sync metadata (``skrsync``) (6, 10).
7. Install / update the agent and map its readiness to ``SKRWebhook`` (12, SKR webhook part).
8. ``SKRWatcherHeartbeat`` from the listener's heartbeat tracker (ours).
9. Write the status only when it changed; requeue: Ready -> 30 min while the agent sends heartbeats,
   5 min otherwise (or earlier when a certificate or key rotation is due); Processing -> the
   installer's readiness poll; Error -> backoff.

Events can overtake their write: the agent sees a change in a *validating admission* call, before
the API server stores it, and answers and sends at once, so the reconcile may read the runtime
Kyma before the edit is visible. A reconcile woken by a runtime event that finds the runtime Kyma's
spec unchanged since the previous reconcile therefore looks again after ``event_settle_delay``
(once per such event; remembered per Kyma in memory, a digest per Kyma).

With ``KymaControllerConfig.modules`` (``--kyma-modules``) the module half runs after step 7
(``modulesync``): the runtime Kyma's ``spec.modules``/``spec.channel`` resolve through the namespace's
ModuleReleaseMetas and ModuleTemplates to one Manifest per module, ``status.modules`` and condition
``Modules`` follow the Manifests, and the state aggregates modules and conditions (Error > Warning >
Processing > a condition not True > Ready; ``SKRWatcherHeartbeat`` is informational).

Not here yet (later issues), and deliberately not stubbed: Manifest -> Kyma and ModuleTemplate/MRM
-> Kyma triggers, the ``ModuleCatalog``/``CRDsSync`` conditions, CRD and catalog sync into the
runtime, the runtime Kyma's status sync, mandatory modules, maintenance windows, Manifest deletion
on Kyma deletion, image pull Secret sync.
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
from kyma_operator.api.kyma import KYMA_CONDITION_REASON, Kyma, KymaConditionType, KymaSpec
from kyma_operator.api.meta import Condition, InvalidObjectError, State
from kyma_operator.api.resources import KYMAS
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.heartbeat import HeartbeatSource, ObservedHealth
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.moduleresolution import aggregate_state
from kyma_operator.controllers.kyma.modulesync import ModuleSync
from kyma_operator.controllers.kyma.skrsync import RemoteKyma, RemoteKymaSync, RemoteSyncError
from kyma_operator.controllers.kyma.triggers import RUNTIME_EVENT, RUNTIME_EVENT_REREAD
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


class KymaControllerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str = Field(default=names.KCP_NAMESPACE, min_length=1)
    """Where Kymas and their access Secrets live (upstream: kcp-system)."""
    sync_namespace: str = Field(default=names.SKR_NAMESPACE, min_length=1)
    """The runtime namespace of the Kyma copy and the agent (upstream ``--sync-namespace``)."""
    remote_kyma_name: str = Field(default=names.DEFAULT_REMOTE_KYMA_NAME, min_length=1)
    workers: int = Field(default=4, ge=1, le=64)
    modules: bool = False
    """Run the module half (``ModuleSync``): Manifests and ``status.modules``."""
    healthy_interval: float = Field(default=1800.0, gt=0)
    """Safety net for a Ready Kyma whose agent sends heartbeats (DESIGN: 30 min)."""
    unhealthy_interval: float = Field(default=300.0, gt=0)
    """Safety net otherwise: upstream's ``--kyma-requeue-success-interval`` (5 min)."""
    skip_interval: float = Field(default=300.0, gt=0)
    """Requeue of a Kyma labelled skip-reconciliation (upstream: 5 min)."""
    failure_base_delay: float = Field(default=5.0, gt=0)
    failure_max_delay: float = Field(default=30.0, gt=0)
    """Backoff of failed reconciles (upstream ``--failure-base-delay`` / ``--failure-max-delay``)."""
    event_settle_delay: float = Field(default=0.25, gt=0)
    """Re-read delay when a runtime event arrived but the runtime Kyma looks unchanged (see below)."""
    intake_capacity: int = Field(default=4096, ge=1)
    """Kymas that may wait in the queue before the listener's intake pushes back (429)."""
    event_throttle_window: float = Field(default=0.5, ge=0)
    """Runtime events for one Kyma within this window after a forward become one trailing reconcile."""
    heartbeat_sweep_interval: float = Field(default=30.0, gt=0)
    heartbeat_max_silence: float = Field(default=DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS, gt=0)
    """Silence after which the runtime's agent counts as unhealthy (same value as the listener's)."""
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

    def line(self) -> str:
        why = ", ".join(self.triggers) or "requeue"
        spec = f"; runtime Kyma {self.remote_spec}" if self.remote_spec else ""
        written = "" if self.status_written else " (status unchanged)"
        return f"reconcile Kyma {self.request} [{why}]: {self.outcome}: {self.message}{spec}{written}"


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
    ) -> None:
        self.client = client
        self.modules = modules
        """The module half (Manifests, ``status.modules``); None: the watcher part only."""
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
        self._remote_specs: dict[Request, str] = {}
        """Digest of the runtime Kyma's spec as the last reconcile read it."""
        self.settle_rereads = 0

    # -- entry point -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        started = self.clock.now()
        triggers = current_triggers()
        for callback in self.on_start:
            callback(request, triggers)
        report = _Report(request, triggers, started)
        try:
            return await self._reconcile(request, report)
        except Exception as exc:
            if report.outcome != State.ERROR.value:
                report.set(State.ERROR.value, f"{type(exc).__name__}: {exc} (retrying with backoff)")
            raise
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
            self.observed_health.forget(request)
            self._remote_specs.pop(request, None)
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
        return await self._apply(kyma, request, rv, report)

    # -- normal path -----------------------------------------------------------------------------

    async def _apply(self, kyma: Kyma, request: Request, rv: str, report: _Report) -> Result:
        now = self._now()
        heartbeat = self._heartbeat_condition(kyma, request, now)
        try:
            skr = await self.skr_clients.get(request)
        except SkrAccessError as exc:
            condition = st.unreachable_condition(exc.reason, f"cannot reach the runtime: {exc.message}", now)
            return await self._fail(kyma, rv, report, condition, heartbeat, exc.message)
        try:
            remote = await self.remote.ensure(kyma, skr)
        except (KubeError, RemoteSyncError) as exc:
            evicted = await self.skr_clients.evict_on_error(request, exc)
            reason = st.REASON_RUNTIME_UNREACHABLE if evicted else st.REASON_RUNTIME_SYNC_FAILED
            where = f"{self.config.sync_namespace}/{self.config.remote_kyma_name}"
            message = f"syncing the runtime Kyma {where} failed: {exc}"
            condition = st.unreachable_condition(reason, message, now)
            return await self._fail(kyma, rv, report, condition, heartbeat, message)
        report.remote_spec = remote.describe_spec()
        settle = self._needs_settle_reread(request, remote, report.triggers)
        agent = await self.installers.for_kyma(kyma.name).ensure(kyma, skr)
        state, webhook = st.webhook_condition(agent, now)
        outcome = st.Outcome(state, (webhook, *heartbeat), _operation(state, agent.message))
        if self.modules is not None:
            outcome = await self._sync_modules(kyma, remote, outcome, now)
            state = outcome.state
        written = await self._write_status(kyma, rv, outcome, now)
        report.set(state.value, f"{webhook.reason}: {webhook.message}", written)
        if state is State.ERROR:
            return Result(requeue=True)
        if state is State.READY:
            interval = self.config.healthy_interval if self._healthy(kyma) else self.config.unhealthy_interval
        else:
            interval = self.config.unhealthy_interval
        if agent.requeue_after is not None:
            interval = min(interval, max(1.0, agent.requeue_after))
        if settle:
            return Result(
                requeue_after=min(interval, self.config.event_settle_delay), reason=RUNTIME_EVENT_REREAD
            )
        return Result(requeue_after=interval)

    async def _sync_modules(
        self, kyma: Kyma, remote: RemoteKyma, outcome: st.Outcome, now: datetime.datetime
    ) -> st.Outcome:
        """The module half: the runtime Kyma's ``spec.modules``/``spec.channel`` decide the Manifests
        (upstream: the SKR copy owns them); the state aggregates modules and conditions."""
        assert self.modules is not None
        try:
            spec = KymaSpec.model_validate(
                {
                    "channel": remote.spec.get("channel") or kyma.spec.channel,
                    "modules": remote.spec.get("modules") or [],
                }
            )
        except ValidationError as exc:
            message = f"the runtime Kyma's spec is invalid: {exc.errors()[0]['msg']}"
            bad = st.condition(KymaConditionType.MODULES.value, False, "InvalidSpec", message, now)
            return st.Outcome(State.ERROR, (*outcome.conditions, bad), _operation(State.ERROR, message))
        desired = kyma.model_copy(update={"spec": spec})
        result = await self.modules.sync(desired)
        failing = [m.name for m in result.modules if m.state is not State.READY]
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
        return st.Outcome(
            state, conditions, _operation(state, modules_condition.message), tuple(result.modules)
        )

    def _needs_settle_reread(self, request: Request, remote: RemoteKyma, triggers: tuple[str, ...]) -> bool:
        digest = hashlib.sha256(json.dumps(remote.spec, sort_keys=True).encode()).hexdigest()
        previous = self._remote_specs.get(request)
        self._remote_specs[request] = digest
        reread = RUNTIME_EVENT in triggers and previous == digest and not remote.created
        if reread:
            self.settle_rereads += 1
        return reread

    async def _fail(
        self,
        kyma: Kyma,
        rv: str,
        report: _Report,
        condition: Condition,
        heartbeat: tuple[Condition, ...],
        message: str,
    ) -> Result:
        now = self._now()
        outcome = st.Outcome(State.ERROR, (condition, *heartbeat), message)
        written = await self._write_status(kyma, rv, outcome, now)
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

    async def _write_status(self, kyma: Kyma, rv: str, outcome: st.Outcome, now: datetime.datetime) -> bool:
        """Patch the status subresource if ``outcome`` changes it; True if written.

        The cache may lag behind our own last write (e.g. the reconcile woken by our finalizer
        patch): on a conflict the Kyma is read once from the API and compared again.
        """
        desired = st.next_status(kyma.status, outcome, now)
        if desired is None:
            return False
        patch = {"metadata": {"resourceVersion": rv}, "status": st.status_patch(desired)}
        try:
            await self.client.patch_status(KYMAS, kyma.name, patch, kyma.namespace)
        except Conflict:
            fresh = Kyma.from_object(await self.client.get(KYMAS, kyma.name, kyma.namespace))
            desired = st.next_status(fresh.status, outcome, now)
            if desired is None:
                return False
            patch = {
                "metadata": {"resourceVersion": fresh.metadata.resource_version},
                "status": st.status_patch(desired),
            }
            await self.client.patch_status(KYMAS, kyma.name, patch, kyma.namespace)
        self.status_writes += 1
        return True

    # -- deletion --------------------------------------------------------------------------------

    async def _delete(self, kyma: Kyma, request: Request, report: _Report) -> Result:
        if names.KYMA_FINALIZER not in kyma.metadata.finalizers:
            report.set("deleted", "deleting; no finalizer of ours left")
            return Result()
        now = self._now()
        rv = kyma.metadata.resource_version or ""
        outcome = st.Outcome(State.DELETING, (), "waiting for the runtime to be cleaned up")
        desired = st.next_status(kyma.status, outcome, now)
        if desired is not None:
            patch = {"metadata": {"resourceVersion": rv}, "status": st.status_patch(desired)}
            updated = await self.client.patch_status(KYMAS, kyma.name, patch, kyma.namespace)
            self.status_writes += 1
            rv = str((updated.get("metadata") or {}).get("resourceVersion") or rv)
        skr = await self._reachable(request)
        installer = self.installers.for_kyma(kyma.name)
        skipped = ""
        if skr is not None:
            try:
                await installer.remove(kyma, skr)
                await self._delete_remote_kyma(skr)
            except KubeError as exc:
                if not await self.skr_clients.evict_on_error(request, exc):
                    raise
                skipped = f" (runtime unreachable: {type(exc).__name__}; runtime part skipped)"
                skr = None
        if skr is None:
            await installer.remove(kyma, None)
            skipped = skipped or " (runtime unreachable; runtime part skipped)"
        await self.skr_clients.evict(request, "kyma-deleted")
        self.observed_health.forget(request)
        self._remote_specs.pop(request, None)
        finalizers = [f for f in kyma.metadata.finalizers if f != names.KYMA_FINALIZER]
        try:
            await self.client.patch(
                KYMAS,
                kyma.name,
                {"metadata": {"resourceVersion": rv, "finalizers": finalizers}},
                kyma.namespace,
                field_manager=self.config.field_manager,
            )
        except NotFound:
            pass
        except Conflict:
            report.set(State.DELETING.value, "finalizer removal conflicted; retrying")
            return Result(requeue=True)
        report.set("deleted", f"agent removed, finalizer dropped{skipped}", desired is not None)
        return Result()

    async def _reachable(self, request: Request) -> KubeClient | None:
        try:
            return await self.skr_clients.get(request)
        except SkrAccessError as exc:
            log.info("Kyma %s is being deleted and its runtime cannot be reached: %s", request, exc.message)
            return None

    async def _delete_remote_kyma(self, skr: KubeClient) -> None:
        with contextlib.suppress(NotFound):
            await skr.delete(KYMAS, self.config.remote_kyma_name, self.config.sync_namespace)


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
        )
