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
   catalog (``runtimecatalog``, condition ``ModuleCatalog``) (12). The Manifests are written
   first; then the agent (8) and the runtime's catalog are checked side by side
   (``RuntimeRound.checks``). A reconcile woken by edits alone that wrote Manifests leaves those
   checks to a reconcile ``checks_after_write`` later (``_leave_checks``) and reports the agent
   and the catalog as last checked.
10. State: Error > Warning > Processing > a condition not True > Ready (13; ``SKRWatcherHeartbeat``
    is informational). The KCP status is written only when it changed, then the runtime copy's
    status only when it differs from KCP's (14). Requeue: Ready -> 30 min while the agent sends
    heartbeats, 5 min otherwise (or earlier when a rotation is due); Processing -> the installer's
    readiness poll; Warning -> 30 s; Error -> backoff.

Where: the flow and the one status/requeue tail (``_finish``) here; the runtime round in
``runtimeround``, deletion (3.4) in ``deletion``, the module half in ``modulehalf``, the KCP writes
in ``statuswrite``, what is remembered per Kyma in ``memory``. Every reconcile takes the same flow;
a reconcile woken by Manifest changes alone reuses the last runtime round from memory instead of
re-reading the runtime (``KymaMemory.reusable_round``).

Events can overtake their write: the agent sees a change in a *validating admission* call, before
the API server stores it, and answers and sends at once, so the reconcile may read the runtime
Kyma before the edit is visible. A reconcile woken by a runtime event that finds the runtime Kyma's
spec unchanged since the previous reconcile therefore looks again after each of
``event_settle_delays`` (``common.settle``; scheduled in the Kyma's memory).

Maintenance windows (``maintenance``) hold upgrades in the module half; the tail reconciles again
when the window an upgrade waits for begins.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kyma_operator.agentinstall.readiness import AgentStatus
from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma, KymaConditionType
from kyma_operator.api.meta import Condition, ConditionStatus, InvalidObjectError, State, find_condition
from kyma_operator.controllers.common.heartbeat import NO_AGENT_HEALTH, AgentHealth
from kyma_operator.controllers.kyma import status as st
from kyma_operator.controllers.kyma.config import KymaControllerConfig, single_cluster
from kyma_operator.controllers.kyma.deletion import KymaDeletion
from kyma_operator.controllers.kyma.heartbeat import ObservedHealth
from kyma_operator.controllers.kyma.installers import Installers
from kyma_operator.controllers.kyma.memory import KymaMemories, KymaMemory, RuntimeRound, woken_by_edits
from kyma_operator.controllers.kyma.metrics import INTENDED, UNEXPECTED, KymaMetrics
from kyma_operator.controllers.kyma.modulehalf import (
    NO_MODULE_HALF,
    CatalogCheck,
    ModuleHalf,
    module_states,
    operation,
    with_catalog,
    with_modules,
)
from kyma_operator.controllers.kyma.pullsecret import ImagePullSecretSync
from kyma_operator.controllers.kyma.report import Collector, KymaReport
from kyma_operator.controllers.kyma.runtimecrds import RuntimeCrdSync
from kyma_operator.controllers.kyma.runtimeround import RuntimeRound as RuntimeSide
from kyma_operator.controllers.kyma.runtimeround import Unreachable
from kyma_operator.controllers.kyma.statuswrite import KymaWriter
from kyma_operator.controllers.kyma.triggers import KymaTrigger
from kyma_operator.remote.cache import SkrClientCache
from kyma_operator.runtime.clock import Clock, RealClock, utc_now
from kyma_operator.runtime.controller import TerminalError
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.triggers import current_triggers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Step:
    """Where the flow arrived before the tail: the outcome and what the tail does with it."""

    outcome: st.Outcome
    message: str
    agent_requeue: float | None = None
    found_nothing: bool = False
    """The runtime Kyma's spec is unchanged since the previous read (a runtime event overtook it)."""
    copy_status: bool = False
    """Copy the status into the runtime Kyma (the runtime was reached, now or in the reused round)."""
    fresh: bool = True
    """The remembered runtime Kyma was read by this reconcile."""


class KymaReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        kymas: Informer,
        skr_clients: SkrClientCache,
        installers: Installers,
        crds: RuntimeCrdSync,
        config: KymaControllerConfig | None = None,
        health: AgentHealth = NO_AGENT_HEALTH,
        observed_health: ObservedHealth | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
        modules: ModuleHalf = NO_MODULE_HALF,
        metrics: KymaMetrics | None = None,
        pull_secret: ImagePullSecretSync | None = None,
    ) -> None:
        self.client = client
        self.kymas = kymas
        self.skr_clients = skr_clients
        self.config = config or KymaControllerConfig()
        self.modules = modules
        """The module half (Manifests, ``status.modules``, runtime catalog); or its null object."""
        self.metrics = metrics or KymaMetrics()
        self.health = health
        """The runtimes' agent liveness (the listener's tracker); ``NO_AGENT_HEALTH`` without one."""
        self.observed_health = observed_health if observed_health is not None else ObservedHealth()
        self.clock = clock or RealClock()
        self._now = wall_clock
        self.memories = KymaMemories(self.observed_health, self.metrics)
        self.writer = KymaWriter(client, self.memories, field_manager=self.config.field_manager)
        self.runtime = RuntimeSide(
            kymas=kymas,
            skr_clients=skr_clients,
            installers=installers,
            crds=crds,
            modules=modules,
            config=self.config,
            pull_secret=pull_secret,
        )
        self.deletion = KymaDeletion(
            client,
            config=self.config,
            skr_clients=skr_clients,
            installers=installers,
            crds=crds,
            modules=modules,
            writer=self.writer,
            memories=self.memories,
        )
        self.observers: list[Callable[[KymaReport], None]] = []
        self.on_start: list[Callable[[Request, tuple[str, ...]], None]] = []
        """Called as a reconcile begins (benchmarks measure event -> reconcile start)."""
        self.settle_rereads = 0

    @property
    def status_writes(self) -> int:
        return self.writer.status_writes

    @property
    def remote_status_writes(self) -> int:
        return self.runtime.remote_status_writes

    def forget(self, request: Request) -> None:
        """Drop what this process remembers of a Kyma (gone, deleted, or its shard now held by
        another replica) and its metric series; its runtime client is evicted separately."""
        self.memories.forget(request)

    # -- entry point -----------------------------------------------------------------------------

    async def reconcile(self, request: Request) -> Result:
        started = self.clock.now()
        triggers = current_triggers()
        for callback in self.on_start:
            callback(request, triggers)
        report = Collector(request, triggers, started)
        try:
            result = await self._reconcile(request, report)
        except Exception as exc:
            if report.outcome != State.ERROR.value:
                report.set(State.ERROR.value, f"{type(exc).__name__}: {exc} (retrying with backoff)")
            self.metrics.requeue(report.requeue_reason or "kyma_reconcile_failed", UNEXPECTED)
            raise
        else:
            # a reason without a requeue: a finished step upstream counts (kyma_deletion)
            if result.requeue or result.requeue_after is not None or report.requeue_reason:
                kind = UNEXPECTED if report.outcome == State.ERROR.value else INTENDED
                self.metrics.requeue(report.requeue_reason or _requeue_reason(report.outcome), kind)
            return result
        finally:
            if report.outcome:
                done = report.freeze(self.clock.now())
                log.info("%s", done.line())
                for observer in self.observers:
                    observer(done)

    async def _reconcile(self, request: Request, report: Collector) -> Result:
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
        now = self._now()
        if kyma.is_deleting():
            return await self.deletion.delete(kyma, request, now, report)
        if kyma.skip_reconciliation():
            report.set("skipped", f"label {names.SKIP_RECONCILIATION_LABEL}=true")
            return Result(requeue_after=self.config.skip_interval)
        rv = await self.writer.ensure_finalizer(kyma)
        memory = self.memories[request]
        triggers = KymaTrigger.of(report.triggers)
        look = memory.settle.look(KymaTrigger.RUNTIME_EVENT in triggers, self.clock.now())
        if look and KymaTrigger.RUNTIME_EVENT_REREAD not in triggers:
            report.triggers = (*report.triggers, KymaTrigger.RUNTIME_EVENT_REREAD)
        checks_due = memory.checks_due is not None and self.clock.now() >= memory.checks_due
        if checks_due and KymaTrigger.RUNTIME_CHECKS_DUE not in triggers:
            report.triggers = (*report.triggers, KymaTrigger.RUNTIME_CHECKS_DUE)
        if single_cluster(kyma):
            step = await self._local(kyma, now, report)
        elif (reusable := memory.reusable_round(triggers, look, self.clock.now())) is not None:
            step = await self._reuse_round(kyma, reusable, now, report)
        else:
            edit = woken_by_edits(triggers, look)
            step = await self._full(kyma, request, memory, now, report, edit=edit)
        return await self._finish(kyma, request, rv, memory, step, look, now, report)

    # -- the flows -------------------------------------------------------------------------------

    async def _full(
        self,
        kyma: Kyma,
        request: Request,
        memory: KymaMemory,
        now: datetime.datetime,
        report: Collector,
        *,
        edit: bool,
    ) -> _Step:
        """The whole flow. ``edit``: woken by edits alone (``memory.woken_by_edits``). Such a
        reconcile that writes Manifests, or that comes while checks left out by one are not yet
        due, leaves the agent and catalog checks to a reconcile ``checks_after_write`` after that
        write (``_leave_checks``)."""
        heartbeat = self._heartbeat_condition(kyma, request, now)
        opened = await self.runtime.open(kyma, request, memory, heartbeat, now, report)
        if isinstance(opened, Unreachable):
            return self._unreachable(kyma, opened)
        found_nothing = self.runtime.observe(memory, opened.remote)
        spec_source = {
            "channel": opened.remote.spec.get("channel") or kyma.spec.channel,
            "modules": opened.remote.spec.get("modules") or [],
        }
        # Manifests first: a module enabled in the runtime reaches KCP before the agent is checked
        modules_run = await self.modules.run(kyma, spec_source, now, report)
        wrote = modules_run is None or modules_run.result is None or bool(report.applied or report.deleted)
        seen = self.modules.manifest_versions(kyma)
        catalog: CatalogCheck | None = None
        wrote_manifests = bool(report.applied or report.deleted)
        if edit and (agent := self._leave_checks(memory, wrote_manifests, report)) is not None:
            catalog_condition = find_condition(kyma.status.conditions, KymaConditionType.MODULE_CATALOG.value)
        else:
            agent, catalog = await self.runtime.checks(kyma, opened.skr, memory, now, report)
            catalog_condition = None
            memory.checks_due = None
        state, webhook = st.webhook_condition(agent, now)
        outcome = st.Outcome(state, (webhook, *opened.conditions), operation(state, agent.message))
        memory.round = RuntimeRound(spec_source, outcome, agent)
        if catalog_condition is not None:
            outcome = _with_last_catalog(outcome, catalog_condition)
        if not wrote and self.modules.manifest_versions(kyma) != seen:
            # a Manifest changed while the runtime was checked (~50 ms): the status written below
            # shows it, instead of waiting for the reconcile queued behind this one (not after
            # writes of our own: their echo may not be in the cache yet)
            modules_run = await self.modules.run(kyma, spec_source, now, report)
        if modules_run is not None:
            outcome = with_catalog(with_modules(outcome, modules_run, now), catalog)
        message = f"{webhook.reason}: {webhook.message}"
        return _Step(outcome, message, agent.requeue_after, found_nothing, copy_status=True)

    def _leave_checks(
        self, memory: KymaMemory, wrote_manifests: bool, report: Collector
    ) -> AgentStatus | None:
        """The agent as last checked, if this reconcile (woken by edits alone) leaves the agent and
        catalog checks to a reconcile ``checks_after_write`` after its Manifest write, or after
        the write of a reconcile shortly before (``memory.checks_due``); None: check now.

        Why: those checks read the runtime in one burst right after the Manifest write, and their
        answers are decoded on the event loop that the new Manifest's install shares (step 3 of
        ``benchmarks.enable_steps``, ``results/enable_steps.md``). A module edit changes neither
        the agent nor the catalog. Only with an earlier round whose agent was Ready; never after
        a catalog change or a timer (a fleet rollout would open each runtime twice)."""
        delay = self.config.checks_after_write
        last = memory.round
        if delay <= 0 or last is None or not last.agent.ready:
            return None
        now = self.clock.now()
        if memory.checks_due is None:
            if not wrote_manifests:
                return None
            memory.checks_due = now + delay
            # the delay itself: (now + delay) - now can come out a rounding above it
            report.checks_left = delay
            return last.agent
        if now >= memory.checks_due:
            return None
        report.checks_left = memory.checks_due - now
        return last.agent

    async def _reuse_round(
        self, kyma: Kyma, reused: RuntimeRound, now: datetime.datetime, report: Collector
    ) -> _Step:
        """Only Manifests changed since the last full reconcile (their state, a deletion): the
        module half on the runtime round remembered from it, without re-checking the runtime's
        CRDs, agent and catalog (their own triggers and the safety net do that). Manifest state
        reaches the Kyma in one KCP write and at most one runtime write."""
        modules_run = await self.modules.run(kyma, reused.spec_source, now, report)
        outcome = reused.base
        catalog = find_condition(kyma.status.conditions, KymaConditionType.MODULE_CATALOG.value)
        if catalog is not None:
            outcome = _with_last_catalog(outcome, catalog)
        outcome = with_modules(outcome, modules_run, now)
        message = f"modules only: {outcome.operation}"
        return _Step(outcome, message, reused.agent_requeue, copy_status=True, fresh=False)

    async def _local(self, kyma: Kyma, now: datetime.datetime, report: Collector) -> _Step:
        """Single-cluster mode: modules from the KCP Kyma's own spec, installed next to the operator."""
        outcome = st.Outcome(State.READY, (), "kyma is ready")
        spec_source = {
            "channel": kyma.spec.channel,
            "modules": [m.model_dump(mode="json", by_alias=True) for m in kyma.spec.modules],
        }
        modules_run = await self.modules.run(kyma, spec_source, now, report)
        outcome = with_modules(outcome, modules_run, now)
        return _Step(outcome, f"single-cluster: {outcome.operation}")

    def _unreachable(self, kyma: Kyma, failure: Unreachable) -> _Step:
        """The runtime cannot be reached or prepared: Kyma Error, and (module half) every module
        entry Error too, since nothing about them can be known (upstream step 4)."""
        condition = failure.condition
        modules = self.modules.failed_entries(kyma, failure.message)
        outcome = st.Outcome(State.ERROR, (condition, *failure.conditions), failure.message, modules)
        return _Step(outcome, f"{condition.reason}: {condition.message}")

    # -- the one tail ----------------------------------------------------------------------------

    async def _finish(
        self,
        kyma: Kyma,
        request: Request,
        rv: str,
        memory: KymaMemory,
        step: _Step,
        look: int | None,
        now: datetime.datetime,
        report: Collector,
    ) -> Result:
        """Status (only on change), the runtime copy's status, metrics, the report, the requeue."""
        outcome = step.outcome
        written = await self.writer.status(kyma, rv, outcome, now, report)
        if step.copy_status:
            await self.runtime.copy_status(kyma, request, memory, fresh=step.fresh)
        self.metrics.record(kyma, outcome.state, module_states(outcome), report.mandatory)
        report.set(outcome.state.value, step.message, written)
        failed = outcome.state is State.ERROR
        delays = self.config.event_settle_delays
        settle = memory.settle.after(look, step.found_nothing and not failed, delays, self.clock.now())
        if failed:
            return Result(requeue=True)
        safety_net = interval = self._interval(kyma, outcome.state)
        if step.agent_requeue is not None:
            interval = min(interval, max(1.0, step.agent_requeue))
        if report.wake_after is not None:  # an upgrade waits for a maintenance window to begin
            interval = min(interval, max(1.0, report.wake_after))
        due = memory.checks_due
        if due is not None and due > self.clock.now():  # no Result.reason: the next reconcile takes notes
            interval = min(interval, due - self.clock.now())
        if settle is None:  # the safety net may come a little early; a time something is due may not
            return Result(requeue_after=interval, periodic=interval == safety_net)
        if look is not None:
            self.settle_rereads += 1
        return Result(requeue_after=min(interval, settle), reason=KymaTrigger.RUNTIME_EVENT_REREAD)

    def _interval(self, kyma: Kyma, state: State) -> float:
        if state is State.READY:
            healthy = self.health.healthy(kyma.runtime_id()) or single_cluster(kyma)
            return self.config.healthy_interval if healthy else self.config.unhealthy_interval
        if state is State.WARNING:
            return min(self.config.warning_interval, self.config.unhealthy_interval)
        return self.config.unhealthy_interval

    def _heartbeat_condition(
        self, kyma: Kyma, request: Request, now: datetime.datetime
    ) -> tuple[Condition, ...]:
        if not self.health.tracked:
            return ()
        runtime_id = kyma.runtime_id()
        healthy = self.health.healthy(runtime_id)
        self.observed_health.record(request, healthy)
        return (
            st.heartbeat_condition(
                runtime_id,
                healthy=healthy,
                ever_seen=self.health.ever_seen(runtime_id),
                max_silence=self.health.max_silence,
                now=now,
            ),
        )


def _with_last_catalog(outcome: st.Outcome, catalog: Condition) -> st.Outcome:
    """``outcome`` with the ``ModuleCatalog`` condition of the Kyma's status (a reconcile that did
    not check the catalog); a failed one keeps the Kyma in Error."""
    failed = catalog.status is not ConditionStatus.TRUE
    return st.Outcome(
        State.ERROR if failed else outcome.state,
        (*outcome.conditions, catalog),
        catalog.message if failed else outcome.operation,
        outcome.modules,
        outcome.active_channel,
    )


def _requeue_reason(outcome: str) -> str:
    return {
        State.READY.value: "kyma_ready_safety_net",
        State.PROCESSING.value: "kyma_processing",
        State.WARNING.value: "kyma_warning",
        State.ERROR.value: "kyma_error",
        "skipped": "kyma_skip_reconciliation",
    }.get(outcome, "kyma_requeue")
