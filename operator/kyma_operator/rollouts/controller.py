"""The leader's rollout controller: one reconcile of a ``ModuleRollout`` run (docs/rollouts.md §5, §7).

Why one writer: the run's status is the fleet's decision (frontier, phase, timestamps). Only the
replica holding the leader-election Lease runs this controller; it writes the status with the
resourceVersion it read (a deposed leader's late write conflicts and is dropped).

A reconcile:

1. reads the run from the informer (gone: its metrics go; a run that does not parse is ``Invalid``
   and holds nobody back; a terminal run is left alone);
2. a newer run of the same module and channel exists -> this one is ``Superseded`` (§8.4);
3. otherwise observes the run's members from the Kyma and Manifest informers (``observe``) and asks
   the pure ``progress.step`` for the next status, the events of the transition and the next
   deadline;
4. writes the status only when it changed (compared with what the informer holds, as the Kyma's
   status writer does), with the resourceVersion precondition, and emits the step's Kubernetes
   events exactly then: a replayed reconcile finds the transition written and emits nothing;
5. returns the next deadline as ``requeue_after``: one timer per run, armed from persisted
   timestamps (a new leader re-arms it on its first reconcile), not a poll.

The counts (``waves[].upgraded`` ... ``totals``, ``failedKymas``) are informational: a status whose
decision fields (phase, frontier, timestamps, revert, conditions) are unchanged is written at most
once per ``count_interval`` (2 s), so 5,000 Manifests turning Ready one after the other cost a
status write every 2 s, not one each (measured before: 2,011 status writes and 172 conflicts for a
5,000-Kyma rollout, ``benchmarks/results/rollout.md``). A decision is written at once.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.meta import Condition, ConditionStatus, InvalidObjectError, set_condition
from kyma_operator.api.modulerollout import (
    MANDATORY_CHANNEL,
    TERMINAL_PHASES,
    ModuleRollout,
    ModuleRolloutStatus,
    OnFailure,
    Phase,
)
from kyma_operator.api.resources import MODULE_ROLLOUTS
from kyma_operator.rollouts import classify, progress
from kyma_operator.rollouts.metrics import RolloutMetrics
from kyma_operator.rollouts.starter import newer
from kyma_operator.runtime.clock import Clock, RealClock, utc_now
from kyma_operator.runtime.errors import Conflict, KubeError, NotFound
from kyma_operator.runtime.informer import Informer
from kyma_operator.runtime.kube import KubeClient
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request, Result
from kyma_operator.runtime.resources import CORE_EVENTS

log = logging.getLogger(__name__)

COMPONENT = "rollout-controller"
"""``source.component`` / ``reportingComponent`` of the events this controller records."""

TIMER = "rollout deadline"
COUNTS = "rollout counts written moments ago"
COUNT_INTERVAL = 2.0
"""Seconds between two status writes that change only the informational counts."""
_INFORMATIONAL = ("totals", "failedKymas")
_WAVE_DECISION_KEYS = ("name", "releasedAt", "soakedAt")
STALE = "rollout status changed since read"
SYNCING = "fleet view still listing"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def status_body(status: ModuleRolloutStatus) -> JSON:
    """The status as written (JSON, aliases, no unset fields)."""
    body: JSON = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return body


def written_status(obj: Mapping[str, Any]) -> JSON | None:
    """The status the informer holds, normalised like ``status_body`` (None: none or unreadable)."""
    raw = obj.get("status")
    if not isinstance(raw, dict) or not raw:
        return None
    try:
        return status_body(ModuleRolloutStatus.model_validate(raw))
    except ValueError:
        return None


def decision_fields(body: JSON | None) -> JSON | None:
    """A written status without its informational counts (what a count-only change leaves equal)."""
    if body is None:
        return None
    kept: JSON = {k: v for k, v in body.items() if k not in _INFORMATIONAL}
    kept["waves"] = [
        {k: v for k, v in wave.items() if k in _WAVE_DECISION_KEYS} for wave in body.get("waves") or []
    ]
    return kept


def counts_wait(
    written: JSON | None, desired: JSON, last_write: float | None, now: float, interval: float
) -> float:
    """Seconds to hold back writing ``desired`` over ``written`` (0: write now): only a change of
    the counts alone within ``interval`` of this replica's last write of the run waits."""
    if desired == written or decision_fields(desired) != decision_fields(written) or last_write is None:
        return 0.0
    return max(0.0, interval - (now - last_write))


@dataclass(frozen=True)
class RolloutEvent:
    """A Kubernetes event to record with a status write: on the run, or on a Kyma (``kyma``)."""

    reason: str
    message: str
    warning: bool = False
    kyma: str | None = None


class RolloutReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        rollouts: Informer,
        kymas: Informer,
        manifests: Informer,
        templates: Informer | None = None,
        metrics: RolloutMetrics | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] = utc_now,
        count_interval: float = COUNT_INTERVAL,
    ) -> None:
        self.client = client
        self.count_interval = count_interval
        self._written_at: dict[Request, float] = {}
        """When (clock seconds) this replica last wrote each run's status."""
        self.rollouts = rollouts
        self.kymas = kymas
        self.manifests = manifests
        self.templates = templates
        """ModuleTemplates (the catalog's informer): is ``fromVersion`` still there to revert to?"""
        self.metrics = metrics or RolloutMetrics(None)
        self.clock = clock or RealClock()
        self.wall_clock = wall_clock
        self.status_writes = 0
        self.conflicts = 0
        """Status writes refused for a stale resourceVersion (then decided again)."""
        self.events: list[tuple[str, str]] = []
        """(object name, reason) of every event recorded (tests, logs)."""
        self._first_failure: dict[Request, float] = {}

    def failure_seen(self, request: Request, at: float) -> None:
        """A member's Manifest turned Error at ``at`` (clock seconds): the halt latency starts."""
        self._first_failure.setdefault(request, at)

    async def reconcile(self, request: Request) -> Result:
        obj = self.rollouts.get(request.namespace, request.name)
        if obj is None:
            self._first_failure.pop(request, None)
            self._written_at.pop(request, None)
            return Result()
        now = self.wall_clock()
        try:
            run = ModuleRollout.from_object(obj)
        except InvalidObjectError as exc:
            await self._invalid(obj, str(exc), now)
            return Result()
        if run.phase() in TERMINAL_PHASES:
            self._first_failure.pop(request, None)
            return Result()
        if not (self.kymas.synced.is_set() and self.manifests.synced.is_set()):
            # the fleet view is still being listed (a leader's own informers, shard-scoped caches,
            # started for unfinished runs): deciding on a partial member list could settle a wave
            # nobody has upgraded yet. A finished run (above) needs no view, which may be stopped.
            return Result(requeue_after=1.0, reason=SYNCING)
        successor = self._successor(run)
        if successor is not None:
            status = run.status.model_copy(
                update={"phase": Phase.SUPERSEDED, "message": f"superseded by rollout {successor}"}
            )
            events = [RolloutEvent("RolloutSuperseded", f"a newer version started rollout {successor}")]
            if await self._write(run, obj, status, events, now) is None:
                return Result(requeue=True, reason=STALE)
            return Result()
        if run.status.started_at is None:
            self._check_revert_source(run, now)
        result = progress.step(run, members_of(run, self.kymas, self.manifests), now)
        events = [RolloutEvent(str(e.reason), e.message, warning=e.warning) for e in result.events]
        timer = None if result.next_timer is None else (result.next_timer - now).total_seconds()
        wait = self._counts_wait(request, obj, result.status) if not events else 0.0
        if wait > 0:
            if timer is not None and timer < wait:
                return Result(requeue_after=max(0.05, timer), reason=TIMER)
            return Result(requeue_after=wait, reason=COUNTS)
        if await self._write(run, obj, result.status, events, now) is None:
            return Result(requeue=True, reason=STALE)
        if timer is None:
            return Result()
        return Result(requeue_after=max(0.05, timer), reason=TIMER)

    def _counts_wait(self, request: Request, obj: Mapping[str, Any], status: ModuleRolloutStatus) -> float:
        return counts_wait(
            written_status(obj),
            status_body(status),
            self._written_at.get(request),
            self.clock.now(),
            self.count_interval,
        )

    def _check_revert_source(self, run: ModuleRollout, now: datetime.datetime) -> None:
        """At the start: ``onFailure: Revert`` needs ``fromVersion``'s template; without it the
        run records ``RevertUnavailable`` and a breach halts instead (docs/rollouts.md §8.5)."""
        if run.spec.policy.on_failure is not OnFailure.REVERT or self.templates is None:
            return
        name = f"{run.spec.module}-{run.spec.from_version}"
        if self.templates.get(run.namespace, name) is not None:
            return
        set_condition(
            run.status.conditions,
            Condition(
                type=progress.ConditionType.REVERT_UNAVAILABLE.value,
                status=ConditionStatus.TRUE,
                reason="TemplateNotFound",
                message=f"ModuleTemplate {name} is gone: a failure halts instead of reverting",
                last_transition_time=now,
                observed_generation=run.metadata.generation,
            ),
        )

    def _successor(self, run: ModuleRollout) -> str | None:
        """The name of a newer run of the same module and channel, if one exists."""
        for other in self.rollouts.list(run.namespace):
            spec = other.get("spec") or {}
            if spec.get("module") != run.spec.module or spec.get("channel") != run.spec.channel:
                continue
            if newer(str(spec.get("toVersion") or ""), run.spec.to_version):
                return str(_meta(other).get("name"))
        return None

    async def _invalid(self, obj: Mapping[str, Any], message: str, now: datetime.datetime) -> None:
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        if isinstance(status, dict) and status.get("phase") == Phase.INVALID.value:
            return
        body = {**obj, "status": {"phase": Phase.INVALID.value, "message": message[:1024]}}
        try:
            await self.client.update_status(MODULE_ROLLOUTS, body)
        except Conflict:
            return
        self.status_writes += 1
        await self._emit(obj, RolloutEvent("RolloutInvalid", message, warning=True))

    async def _write(
        self,
        run: ModuleRollout,
        obj: Mapping[str, Any],
        status: ModuleRolloutStatus,
        events: Iterable[RolloutEvent],
        now: datetime.datetime,
    ) -> bool | None:
        """True: written; False: nothing to write; None: refused (stale resourceVersion)."""
        desired = status_body(status)
        if desired == written_status(obj):
            return False
        body = {**obj, "status": desired}
        try:
            await self.client.update_status(MODULE_ROLLOUTS, body)
        except Conflict:
            # our cache lags behind a write, or another leader wrote: nothing was recorded, nothing
            # emitted; the informer brings the object and the next reconcile decides again
            self.conflicts += 1
            log.info("rollout %s/%s: status changed since read; deciding again", run.namespace, run.name)
            return None
        self.status_writes += 1
        self._written_at[Request(run.namespace, run.name)] = self.clock.now()
        self._observe_transition(run, status, now)
        for event in events:
            await self._emit(obj, event)
        return True

    def _observe_transition(
        self, run: ModuleRollout, status: ModuleRolloutStatus, now: datetime.datetime
    ) -> None:
        before, after = run.status, status
        request = Request(run.namespace, run.name)
        module = run.spec.module
        if after.phase is Phase.HALTED and before.phase is not Phase.HALTED:
            first = self._first_failure.pop(request, None)
            latency = self.clock.now() - first if first is not None else None
            self.metrics.halted(module, halt_reason(after), latency)
        if after.phase is Phase.REVERTING and before.phase is not Phase.REVERTING:
            self.metrics.reverted(module)
        if after.frontier.wave > before.frontier.wave or (
            after.phase is Phase.COMPLETED and before.phase is not Phase.COMPLETED
        ):
            index = before.frontier.wave
            if index < len(before.waves) and before.waves[index].released_at is not None:
                released = before.waves[index].released_at
                assert released is not None
                self.metrics.wave_soaked(module, (now - released).total_seconds())

    async def _emit(self, run: Mapping[str, Any], event: RolloutEvent) -> None:
        await record_event(self.client, run, event, self.wall_clock())
        self.events.append((str(_meta(run).get("name")), event.reason))


def members_of(run: ModuleRollout, kymas: Informer, manifests: Informer) -> list[classify.Member]:
    """The run's members as the informers show them (``members_among`` over their namespace)."""
    return members_among(run, kymas.list(run.namespace), manifests.list(run.namespace))


def members_among(
    run: ModuleRollout, kymas: Iterable[Mapping[str, Any]], manifests: Iterable[Mapping[str, Any]]
) -> list[classify.Member]:
    """The run's members among the Kymas and Manifests of its namespace: the Kymas with a Manifest
    of its module on its channel (for ``mandatory``: the mandatory Manifest), leaving out Kymas that
    are being deleted or not reconciled (they could never become Ready and would stall a wave) and
    Manifests being deleted (a disabled module). Manifests, not the KCP Kyma's ``spec.modules``:
    a remote runtime's modules are listed in its own Kyma, which KCP does not hold."""
    module, channel = run.spec.module, run.spec.channel
    mandatory = channel == MANDATORY_CHANNEL
    by_kyma: dict[str, Mapping[str, Any]] = {}
    for manifest in manifests:
        labels = _meta(manifest).get("labels") or {}
        if labels.get(names.MODULE_NAME_LABEL) != module:
            continue
        if (labels.get(names.MANDATORY_MODULE_LABEL) == names.ENABLE_LABEL_VALUE) != mandatory:
            continue
        if not mandatory and labels.get(names.CHANNEL_LABEL) != channel:
            continue
        if _meta(manifest).get("deletionTimestamp"):
            continue  # a module being disabled follows its channel ungated: no member
        kyma = labels.get(names.KYMA_NAME_LABEL)
        if kyma:
            by_kyma[str(kyma)] = manifest
    members: list[classify.Member] = []
    for kyma in kymas:
        meta = _meta(kyma)
        found = by_kyma.get(str(meta.get("name") or ""))
        if found is None or meta.get("deletionTimestamp"):
            continue
        if (meta.get("labels") or {}).get(names.SKIP_RECONCILIATION_LABEL) == names.ENABLE_LABEL_VALUE:
            continue
        members.append(classify.observe(kyma, found, module))
    return members


def module_reverted(
    kyma: Mapping[str, Any], module: str, run: str, version: str
) -> tuple[JSON, RolloutEvent]:
    """The Kyma's ``ModuleRevertedByRollout`` (the one per-Kyma event, only on the revert path,
    docs/rollouts.md §8.5): recorded by the Kyma reconcile with the Manifest write that reverts."""
    event = RolloutEvent(
        "ModuleRevertedByRollout",
        f"module {module} reverted to {version} by rollout {run} (the recorded exception to the "
        "no-downgrade rule)",
        warning=True,
        kyma=str(_meta(kyma).get("name") or ""),
    )
    target: JSON = {
        "apiVersion": names.KYMA.api_version,
        "kind": names.KYMA.kind,
        "metadata": {
            "name": _meta(kyma).get("name"),
            "namespace": _meta(kyma).get("namespace"),
            "uid": _meta(kyma).get("uid"),
        },
    }
    return target, event


def halt_reason(status: ModuleRolloutStatus) -> str:
    """The ``reason`` label of the halts counter, from the status' ``Halted`` condition."""
    text = " ".join(
        [status.halt_reason or "", *(c.reason or "" for c in status.conditions if c.type == "Halted")]
    ).lower()
    if "revert" in text:
        return "revert_failed"
    if "deadline" in text:
        return "progress_deadline"
    return "failure_budget"


async def record_event(
    client: KubeClient, obj: Mapping[str, Any], event: RolloutEvent, now: datetime.datetime
) -> None:
    """A core/v1 Event on ``obj``; best effort (a failed write is logged, the status is written)."""
    meta = _meta(obj)
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kind = obj.get("kind") or (names.KYMA.kind if event.kyma else names.MODULE_ROLLOUT.kind)
    api_version = obj.get("apiVersion") or (
        names.KYMA.api_version if event.kyma else names.MODULE_ROLLOUT.api_version
    )
    body = {
        "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace") or "default"},
        "involvedObject": {
            "apiVersion": api_version,
            "kind": kind,
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "type": "Warning" if event.warning else "Normal",
        "reason": event.reason,
        "message": event.message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        await client.create(CORE_EVENTS, body)
    except (KubeError, NotFound) as exc:
        log.warning(
            "could not record event %s on %s/%s: %s",
            event.reason,
            meta.get("namespace"),
            meta.get("name"),
            exc,
        )
