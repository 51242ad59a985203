"""One gate step of a rollout: classify the wave members, decide, say when to look again
(docs/rollouts.md §7, §8.3, §8.5, §8.6).

Why pure: the leader's rollout reconcile must be restart-safe and replayable. Everything it decides
follows from the run (spec, status as last written), what the informers show of the member Kymas
and their Manifests, and the time it is given; so ``step(run, members, now)`` returns the new
status, the events of the transitions it made and when the next deadline falls, and the caller
only writes, emits and arms a timer. A replayed step sees its transition already in the status and
emits nothing. Which class each member is in is ``classify``'s (re-exported here).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from kyma_operator.api.meta import Condition, ConditionStatus, State, find_condition, set_condition
from kyma_operator.api.modulerollout import (
    ACTIVE_PHASES,
    MAX_FAILED_KYMAS,
    TERMINAL_PHASES,
    Approval,
    Frontier,
    FrontierStep,
    ModuleRollout,
    ModuleRolloutStatus,
    OnFailure,
    Phase,
    RevertRecord,
    RolloutState,
    Totals,
    WaveStatus,
    scaled,
)
from kyma_operator.rollouts.classify import SETTLED, Class, Classified, Member, classify, observe
from kyma_operator.rollouts.target import in_revert_scope
from kyma_operator.rollouts.waves import placement, threshold_for

__all__ = [
    "Class",
    "Event",
    "EventReason",
    "Member",
    "StepResult",
    "classify",
    "observe",
    "step",
]

_seconds = datetime.timedelta


class EventReason(StrEnum):
    """Kubernetes event reasons on the ModuleRollout (``MODULE_REVERTED`` on the Kyma)."""

    STARTED = "RolloutStarted"
    WAVE_RELEASED = "WaveReleased"
    WAVE_READY = "WaveReady"
    WAVE_SOAKED = "WaveSoaked"
    AWAITING_APPROVAL = "AwaitingApproval"
    PAUSED = "RolloutPaused"
    RESUMED = "RolloutResumed"
    HALTED = "RolloutHalted"
    REVERT_STARTED = "RolloutRevertStarted"
    REVERTED = "RolloutReverted"
    ABORTED = "RolloutAborted"
    COMPLETED = "RolloutCompleted"
    SUPERSEDED = "RolloutSuperseded"
    MODULE_REVERTED = "ModuleRevertedByRollout"


WARNING_REASONS = frozenset({EventReason.HALTED, EventReason.REVERT_STARTED, EventReason.MODULE_REVERTED})


class ConditionType(StrEnum):
    PROGRESSING = "Progressing"
    HALTED = "Halted"
    COMPLETED = "Completed"
    REVERT_UNAVAILABLE = "RevertUnavailable"
    """Set by the leader (before ``step``) when ``fromVersion``'s template is gone: a breach then
    halts instead of reverting (§8.5)."""


class HaltKind(StrEnum):
    """``status.conditions[Halted].reason`` (and the halts metric's ``reason`` label)."""

    FAILURE_BUDGET = "FailureBudgetExceeded"
    REVERT_FAILED = "RevertNotReady"


@dataclass(frozen=True, slots=True)
class Event:
    reason: EventReason
    message: str

    @property
    def warning(self) -> bool:
        return self.reason in WARNING_REASONS


class StepResult(NamedTuple):
    status: ModuleRolloutStatus
    events: list[Event]
    next_timer: datetime.datetime | None


_COUNTED = {
    Class.READY: "ready",
    Class.WAITING: "waiting",
    Class.PENDING: "pending",
    Class.FAILED: "failed",
}


def _counts(run: ModuleRollout, status: ModuleRolloutStatus, classified: Sequence[Classified]) -> None:
    """The informational counts, per wave and in total (plain counters: 5,000 members per step)."""
    keys = ("members", "upgraded", "ready", "waiting", "pending", "failed")
    per_wave = [dict.fromkeys(keys, 0) for _ in run.spec.policy.waves]
    held = switched_in = 0
    ignored = set(run.spec.ignored_kymas)
    failed: list[str] = []
    for item in classified:
        counts = per_wave[item.where.wave]
        counts["members"] += 1
        cls = item.cls
        if cls is Class.HELD or cls is Class.SWITCHED_IN:
            held += 1
            switched_in += cls is Class.SWITCHED_IN
            continue
        counts["upgraded"] += item.upgraded
        key = _COUNTED.get(cls)
        if key is None or (cls is Class.FAILED and item.member.name in ignored):
            continue
        counts[key] += 1
        if cls is Class.FAILED:
            failed.append(item.member.name)
    old = _wave_status(run, status)
    status.waves = [
        WaveStatus(name=w.name, released_at=o.released_at, soaked_at=o.soaked_at, **c)
        for w, o, c in zip(run.spec.policy.waves, old, per_wave, strict=True)
    ]
    status.totals = Totals(
        members=sum(c["members"] for c in per_wave),
        upgraded=sum(c["upgraded"] for c in per_wave),
        ready=sum(c["ready"] for c in per_wave),
        failed=sum(c["failed"] for c in per_wave),
        waiting=sum(c["waiting"] for c in per_wave),
        held=held,
        switched_in=switched_in,
    )
    status.failed_kymas = sorted(failed)[:MAX_FAILED_KYMAS]


def _wave_status(run: ModuleRollout, status: ModuleRolloutStatus) -> list[WaveStatus]:
    by_name = {w.name: w for w in status.waves}
    return [by_name.get(w.name) or WaveStatus(name=w.name) for w in run.spec.policy.waves]


def _breach(run: ModuleRollout, classified: Sequence[Classified], upto: int) -> tuple[int, str] | None:
    """The first wave up to ``upto`` whose failures exceed its budget, and the halt reason."""
    policy = run.spec.policy
    for index in range(min(upto, len(policy.waves) - 1) + 1):
        wave = policy.waves[index]
        members = [c for c in classified if c.where.wave == index]
        failed = [c for c in members if c.cls is Class.FAILED and c.member.name not in run.spec.ignored_kymas]
        budget = scaled(wave.max_failures, len(members))
        if len(failed) > budget:
            failed.sort(key=lambda c: c.member.name)
            detail = "; ".join(f"{c.member.name}: {c.why}" for c in failed[:5])
            return index, (
                f"wave {wave.name}: {len(failed)} failed > maxFailures {wave.max_failures} ({detail})"
            )
    return None


class _Step:
    """The mutable state of one ``step`` call (a fresh copy of the status, the events so far)."""

    def __init__(self, run: ModuleRollout, members: Iterable[Member], now: datetime.datetime) -> None:
        self.run = run
        self.members = list(members)
        self.places = [placement(run, m.labels, m.name) for m in self.members]  # once per step
        self.now = now
        self.status = run.status.model_copy(deep=True)
        self.status.waves = _wave_status(run, self.status)
        self.events: list[Event] = []
        self.classified: list[Classified] = []

    def emit(self, reason: EventReason, message: str) -> None:
        self.events.append(Event(reason, message))

    def classify(self) -> None:
        self.classified = [
            classify(self.run, self.status, m, self.now, where)
            for m, where in zip(self.members, self.places, strict=True)
        ]

    def of_wave(self, index: int) -> list[Classified]:
        return [c for c in self.classified if c.where.wave == index]

    def set_phase(self, phase: Phase) -> None:
        self.status.phase = phase

    def release(self, index: int) -> None:
        """Release wave ``index`` (or wait for its approval / a resume)."""
        wave = self.run.spec.policy.waves[index]
        status = self.status
        status.frontier = Frontier(wave=index, threshold=0.0)
        status.frontier_steps = []
        status.soak_started_at = None
        if wave.approval is Approval.MANUAL and wave.name not in self.run.spec.approved_waves:
            if status.phase is not Phase.AWAITING_APPROVAL:
                self.set_phase(Phase.AWAITING_APPROVAL)
                self.emit(EventReason.AWAITING_APPROVAL, f"wave {wave.name} waits for approval (resume)")
            return
        if self.run.spec.state is RolloutState.PAUSED:
            self.set_phase(Phase.PAUSED)
            return
        self.set_phase(Phase.PROGRESSING)
        status.waves[index].released_at = self.now
        self.classify()
        self.widen(index)
        self.emit(EventReason.WAVE_RELEASED, f"wave {wave.name} released ({len(self.of_wave(index))} Kymas)")

    def widen(self, index: int) -> None:
        """Raise the wave's threshold so that at most ``maxConcurrency`` members are in flight."""
        wave = self.run.spec.policy.waves[index]
        status = self.status
        if status.frontier.threshold >= 1.0:
            return
        members = self.of_wave(index)
        if wave.max_concurrency is None:
            threshold = 1.0
        else:
            limit = max(1, scaled(wave.max_concurrency, len(members), round_up=True))
            in_flight = sum(1 for c in members if c.cls in (Class.PENDING, Class.UPGRADING))
            held = [c.where.order for c in members if c.cls in (Class.HELD, Class.SWITCHED_IN)]
            if in_flight >= limit:
                return
            threshold = threshold_for(held, limit - in_flight)
        status.frontier = Frontier(wave=index, threshold=threshold)
        status.frontier_steps.append(FrontierStep(threshold=threshold, at=self.now))
        self.classify()

    def halt(self, kind: HaltKind, reason: str) -> None:
        status = self.status
        status.halted_at = self.now
        status.halt_reason = reason
        self.set_phase(Phase.HALTED)
        self.emit(EventReason.HALTED, reason)
        set_condition(status.conditions, self.condition(ConditionType.HALTED, True, kind.value, reason))

    def condition(self, kind: ConditionType, value: bool, reason: str, message: str) -> Condition:
        return Condition(
            type=kind.value,
            status=ConditionStatus.TRUE if value else ConditionStatus.FALSE,
            reason=reason,
            message=message,
            last_transition_time=self.now,
            observed_generation=self.run.metadata.generation,
        )


def step(run: ModuleRollout, members: Iterable[Member], now: datetime.datetime) -> StepResult:
    """Decide once: the new status, the events of the transitions made, the next deadline."""
    s = _Step(run, members, now)
    status = s.status
    previous_generation = run.status.observed_generation
    if status.phase not in TERMINAL_PHASES:
        _decide(s, previous_generation)
    s.classify()
    _counts(run, status, s.classified)
    _conditions(s)
    status.observed_generation = run.metadata.generation
    return StepResult(status, s.events, _next_timer(s))


def _decide(s: _Step, previous_generation: int | None) -> None:
    run, status, spec = s.run, s.status, s.run.spec
    policy = spec.policy
    if status.started_at is None:
        status.started_at = s.now
        s.emit(EventReason.STARTED, f"{spec.module} {spec.channel}: {spec.from_version} -> {spec.to_version}")
        s.release(0)
    if spec.state is RolloutState.ABORTED:
        s.set_phase(Phase.ABORTED)
        s.emit(EventReason.ABORTED, f"aborted in wave {policy.waves[status.frontier.wave].name}")
        return
    s.classify()
    if status.phase is Phase.REVERTING:
        _revert_progress(s)
        return
    if status.phase is Phase.HALTED:
        # Left only by a spec change since the halt (``resume --ignore-failed``), never because
        # failures went away by themselves; a halted revert stays halted.
        generation = run.metadata.generation
        changed = (
            generation is not None and previous_generation is not None and generation > previous_generation
        )
        clear = _breach(run, s.classified, status.frontier.wave) is None
        if not (changed and clear and spec.state is RolloutState.RUNNING and status.revert is None):
            return
        status.halted_at = status.halt_reason = None
        s.set_phase(Phase.SOAKING if status.soak_started_at is not None else Phase.PROGRESSING)
        s.emit(EventReason.RESUMED, f"resumed in wave {policy.waves[status.frontier.wave].name}")
    breach = _breach(run, s.classified, status.frontier.wave)
    if breach is not None:
        _fail(s, *breach)
        return
    if spec.state is RolloutState.PAUSED:
        if status.phase is not Phase.PAUSED:
            s.set_phase(Phase.PAUSED)
            s.emit(EventReason.PAUSED, f"paused in wave {policy.waves[status.frontier.wave].name}")
        return
    if status.phase is Phase.PAUSED:
        s.emit(EventReason.RESUMED, f"resumed in wave {policy.waves[status.frontier.wave].name}")
        if status.frontier.threshold == 0.0:
            s.set_phase(Phase.PROGRESSING)
            s.release(status.frontier.wave)
            return
        s.set_phase(Phase.SOAKING if status.soak_started_at is not None else Phase.PROGRESSING)
    if status.phase is Phase.AWAITING_APPROVAL:
        s.release(status.frontier.wave)
    if s.status.phase in (Phase.PROGRESSING, Phase.SOAKING):
        _advance(s)


def _fail(s: _Step, wave: int, reason: str) -> None:
    status, policy = s.status, s.run.spec.policy
    unavailable = find_condition(status.conditions, ConditionType.REVERT_UNAVAILABLE.value)
    can_revert = unavailable is None or unavailable.status is not ConditionStatus.TRUE
    if policy.on_failure is OnFailure.REVERT and can_revert:
        status.halted_at = s.now
        status.halt_reason = reason
        status.soak_started_at = None
        status.revert = RevertRecord(scope=policy.effective_revert_scope(), wave=wave, started_at=s.now)
        s.set_phase(Phase.REVERTING)
        s.emit(EventReason.REVERT_STARTED, f"{reason}; reverting to {s.run.spec.from_version}")
        return
    s.halt(HaltKind.FAILURE_BUDGET, reason)


def _revert_progress(s: _Step) -> None:
    run, status = s.run, s.status
    revert = status.revert
    assert revert is not None
    scope = [c for c in s.classified if in_revert_scope(run, c.where)]
    if all(c.member.version != run.spec.to_version and c.member.state is State.READY for c in scope):
        s.set_phase(Phase.REVERTED)
        s.emit(EventReason.REVERTED, f"{len(scope)} Kymas back at {run.spec.from_version}")
        return
    limit = run.spec.policy.waves[revert.wave].deadline_seconds()
    if limit is not None and s.now >= revert.started_at + _seconds(seconds=limit):
        s.halt(
            HaltKind.REVERT_FAILED,
            f"revert did not become Ready within progressDeadline ({status.halt_reason})",
        )


def _advance(s: _Step) -> None:
    """Progressing/Soaking, no breach: widen the wave, start or finish its soak, move on."""
    run, status = s.run, s.status
    policy = run.spec.policy
    index = status.frontier.wave
    wave = policy.waves[index]
    s.widen(index)
    members = s.of_wave(index)
    gated = [c for c in members if c.member.name not in run.spec.ignored_kymas]
    upgraded = sum(1 for c in members if c.upgraded)
    settled = status.frontier.threshold >= 1.0 and all(c.cls in SETTLED for c in gated)
    if not settled or upgraded < scaled(wave.min_upgraded, len(members), round_up=True):
        if status.phase is Phase.SOAKING:
            status.soak_started_at = None
            s.set_phase(Phase.PROGRESSING)
        return
    if status.soak_started_at is None:
        status.soak_started_at = s.now
        s.set_phase(Phase.SOAKING)
        s.emit(
            EventReason.WAVE_READY,
            f"wave {wave.name}: {upgraded} upgraded Kymas Ready; soaking {wave.soak_time}",
        )
    if s.now < status.soak_started_at + _seconds(seconds=wave.soak_seconds()):
        return
    status.waves[index].soaked_at = s.now
    s.emit(EventReason.WAVE_SOAKED, f"wave {wave.name} soaked")
    if index + 1 < len(policy.waves):
        s.release(index + 1)
        if status.phase is Phase.PROGRESSING:
            _advance(s)  # an empty or already settled wave with no soak moves on at once
        return
    status.soak_started_at = None
    status.completed_at = s.now
    s.set_phase(Phase.COMPLETED)
    s.emit(EventReason.COMPLETED, f"{run.spec.module} {run.spec.to_version} reached every wave")


def _conditions(s: _Step) -> None:
    status, phase = s.status, s.status.phase
    progressing = phase in ACTIVE_PHASES or phase is Phase.REVERTING
    set_condition(
        status.conditions,
        s.condition(ConditionType.PROGRESSING, progressing, phase.value, f"phase {phase.value}"),
    )
    if phase is not Phase.HALTED:
        set_condition(status.conditions, s.condition(ConditionType.HALTED, False, phase.value, "not halted"))
    done = phase is Phase.COMPLETED
    set_condition(
        status.conditions, s.condition(ConditionType.COMPLETED, done, phase.value, f"phase {phase.value}")
    )


def _next_timer(s: _Step) -> datetime.datetime | None:
    status, run = s.status, s.run
    times: list[datetime.datetime] = []
    if status.phase in ACTIVE_PHASES:
        times.extend(
            c.deadline
            for c in s.classified
            if c.deadline is not None and c.cls in (Class.PENDING, Class.UPGRADING)
        )
        if status.phase is Phase.SOAKING and status.soak_started_at is not None:
            wave = run.spec.policy.waves[status.frontier.wave]
            times.append(status.soak_started_at + _seconds(seconds=wave.soak_seconds()))
    elif status.phase is Phase.REVERTING and status.revert is not None:
        limit = run.spec.policy.waves[status.revert.wave].deadline_seconds()
        if limit is not None:
            times.append(status.revert.started_at + _seconds(seconds=limit))
    future = [t for t in times if t > s.now]
    return min(future) if future else None
