"""``step()``: the gates of docs/rollouts.md §7 (deadline, soak, failure budget as count and
percent, minUpgraded, waiting Kymas, manual approval, pause, halt vs revert, ignoredKymas), driven
with an injected ``now`` and a simulated fleet: released Kymas get their Manifest at ``toVersion``
the way ``target()`` says, with the state the test chooses."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kyma_operator.api.meta import State
from kyma_operator.api.modulerollout import ModuleRollout, Phase
from kyma_operator.rollouts.progress import EventReason, Member, StepResult, observe, step
from kyma_operator.rollouts.target import Reason, target
from kyma_operator.rollouts.waves import placement
from tests.unit.kyma_operator.rollouts.runs import CANARY, T0, kymas_in_wave, policy, run

FROM, TO = "1.4.0", "1.5.0"
MINUTE = datetime.timedelta(minutes=1)


class Fleet:
    """Members by name; ``reconcile`` plays every Kyma reconcile (Manifest version per
    ``target()``), ``health`` decides the state a Manifest at ``toVersion`` reports."""

    def __init__(self, canary: int = 2, others: int = 40) -> None:
        self.members: dict[str, Member] = {}
        for n in range(canary):
            self.members[f"canary-{n}"] = Member(f"canary-{n}", dict(CANARY), FROM, State.READY)
        for n in range(others):
            name = f"kyma-{n:05d}"
            self.members[name] = Member(name, {}, FROM, State.READY)
        self.health: Callable[[str], State] = lambda name: State.READY
        self.waiting: set[str] = set()

    def reconcile(self, rollout: ModuleRollout) -> None:
        for name, m in list(self.members.items()):
            if name in self.waiting:
                self.members[name] = Member(name, m.labels, m.version, m.state, waiting=True)
                continue
            got = target(rollout, TO, m.labels, name, m.version)
            if got.version != m.version:
                state = self.health(name) if got.version == TO else State.READY
                self.members[name] = Member(
                    name, m.labels, got.version, state, "boom" if state is State.ERROR else ""
                )
            elif got.reason is Reason.RELEASED and m.state is not self.health(name):
                self.members[name] = Member(name, m.labels, m.version, self.health(name))

    def set(self, name: str, state: State) -> None:
        m = self.members[name]
        self.members[name] = Member(name, m.labels, m.version, state)

    def wave(self, rollout: ModuleRollout, index: int) -> list[str]:
        return [n for n, m in self.members.items() if placement(rollout, m.labels, n).wave == index]


class Driver:
    def __init__(self, rollout: ModuleRollout, fleet: Fleet) -> None:
        self.run = rollout
        self.fleet = fleet
        self.now = T0
        self.events: list[EventReason] = []
        self.last: StepResult | None = None

    def step(self, minutes: float = 0.0, reconcile: bool = True) -> StepResult:
        self.now += minutes * MINUTE
        if reconcile:
            self.fleet.reconcile(self.run)
        result = step(self.run, self.fleet.members.values(), self.now)
        self.run = self.run.model_copy(update={"status": result.status})
        self.events += [e.reason for e in result.events]
        self.last = result
        return result

    def edit(self, **spec: Any) -> None:
        """A spec write (CLI): the generation moves."""
        generation = (self.run.metadata.generation or 0) + 1
        self.run = self.run.model_copy(
            update={
                "spec": self.run.spec.model_validate({**self.run.spec.model_dump(), **spec}),
                "metadata": self.run.metadata.model_copy(update={"generation": generation}),
            }
        )

    def last_event(self) -> EventReason:
        return self.events[-1]

    def phase(self) -> Phase:
        return self.run.status.phase


def _driver(fleet: Fleet | None = None, **policy: Any) -> Driver:
    return Driver(run(**policy), fleet or Fleet())


def test_a_good_version_rolls_through_every_wave_in_order() -> None:
    d = _driver()
    d.step()
    assert d.events == [EventReason.STARTED, EventReason.WAVE_RELEASED] and d.phase() is Phase.PROGRESSING
    assert d.run.status.frontier.wave == 0 and d.run.status.frontier.threshold == 1.0
    d.step()  # the canaries upgraded and report Ready
    assert d.phase() is Phase.SOAKING and d.run.status.waves[0].ready == 2
    assert d.last is not None and d.last.next_timer == T0 + 15 * MINUTE, "soak end"
    upgraded_before = {n for n, m in d.fleet.members.items() if m.version == TO}
    assert upgraded_before == {"canary-0", "canary-1"}, "nothing outside the canary before it soaked"
    d.step(15)
    assert d.run.status.frontier.wave == 1 and d.run.status.waves[0].soaked_at == d.now
    for _ in range(10):
        d.step(60)
        for name, m in d.fleet.members.items():
            wave = placement(d.run, m.labels, name).wave
            if m.version == TO and wave > 0:
                assert d.run.status.waves[wave - 1].soaked_at is not None, "a wave only after the last soaked"
        if d.phase() is Phase.COMPLETED:
            break
    assert d.phase() is Phase.COMPLETED
    assert all(m.version == TO for m in d.fleet.members.values())
    released = [e for e in d.events if e is EventReason.WAVE_RELEASED]
    assert len(released) == 4 and d.last_event() is EventReason.COMPLETED
    assert d.run.status.totals.upgraded == d.run.status.totals.members == 42
    # a replay of the last step changes nothing and emits nothing
    again = step(d.run, d.fleet.members.values(), d.now)
    assert again.status == d.run.status and again.events == [] and again.next_timer is None


def test_progress_deadline_fails_a_kyma_that_is_not_ready_in_time() -> None:
    fleet = Fleet()
    fleet.health = lambda name: State.PROCESSING if name == "canary-1" else State.READY
    d = _driver(fleet)
    d.step()
    d.step(1)
    assert d.phase() is Phase.PROGRESSING and d.last is not None
    assert d.last.next_timer == T0 + 10 * MINUTE, "the timer is the deadline"
    d.step(8.9, reconcile=False)
    assert d.phase() is Phase.PROGRESSING
    d.step(0.1, reconcile=False)
    assert d.phase() is Phase.HALTED
    assert d.run.status.halt_reason == (
        "wave canary: 1 failed > maxFailures 0 (canary-1: not Ready within progressDeadline 10m)"
    )
    assert d.run.status.halted_at == T0 + 10 * MINUTE and d.run.status.failed_kymas == ["canary-1"]
    assert d.last_event() is EventReason.HALTED


def test_manifest_error_halts_at_once_and_names_the_message() -> None:
    fleet = Fleet()
    fleet.health = lambda name: State.ERROR if name == "canary-0" else State.READY
    d = _driver(fleet)
    d.step()
    d.step()
    assert d.phase() is Phase.HALTED
    assert "canary-0: Manifest Error: boom" in (d.run.status.halt_reason or "")
    d.step(60)
    assert d.phase() is Phase.HALTED and d.run.status.frontier.wave == 0, "halt is sticky"
    assert all(m.version == FROM for n, m in d.fleet.members.items() if not n.startswith("canary"))


def test_soak_broken_by_a_flap() -> None:
    d = _driver()
    d.step()
    d.step()
    assert d.phase() is Phase.SOAKING
    d.fleet.set("canary-0", State.WARNING)
    d.step(5, reconcile=False)
    assert d.phase() is Phase.HALTED
    assert "canary-0: left Ready during the soak (Warning)" in (d.run.status.halt_reason or "")


def test_a_flap_within_the_budget_does_not_halt() -> None:
    d = _driver(waves=_waves(canary={"maxFailures": 1}))
    d.step()
    d.step()
    d.fleet.set("canary-0", State.WARNING)
    d.step(5, reconcile=False)
    assert d.phase() is Phase.SOAKING and d.run.status.waves[0].failed == 1
    d.step(10, reconcile=False)
    assert d.run.status.frontier.wave == 1


def _waves(**changes: dict[str, Any]) -> list[dict[str, Any]]:
    waves: list[dict[str, Any]] = policy()["waves"]
    return [{**w, **changes.get(w["name"], {})} for w in waves]


def test_failure_budget_as_count_and_as_percent_rounded_down() -> None:
    # early is 1% of its members: fewer than 100 members -> 0 failures allowed
    fleet = Fleet(canary=1, others=400)
    d0 = _driver(fleet)
    early = fleet.wave(d0.run, 1)
    assert 0 < len(early) < 100
    fleet.health = lambda name: State.ERROR if name == early[0] else State.READY
    d0.step()
    d0.step()
    d0.step(15)
    d0.step()
    assert d0.phase() is Phase.HALTED and d0.run.status.frontier.wave == 1
    # as a count: maxFailures 1 tolerates one, not two
    fleet = Fleet(canary=1, others=400)
    d1 = _driver(fleet, waves=_waves(early={"maxFailures": 1}))
    early = fleet.wave(d1.run, 1)
    fleet.health = lambda name: State.ERROR if name == early[0] else State.READY
    d1.step()
    d1.step()
    d1.step(15)
    d1.step()
    assert d1.phase() is Phase.SOAKING and d1.run.status.waves[1].failed == 1
    fleet.set(early[1], State.ERROR)
    d1.step(1, reconcile=False)
    assert d1.phase() is Phase.HALTED
    # as a percent with enough members: 2% of >= 100 members is at least 2
    fleet = Fleet(canary=1, others=1200)
    d2 = _driver(fleet, waves=_waves(early={"maxFailures": "2%"}))
    early = fleet.wave(d2.run, 1)
    budget = len(early) * 2 // 100
    assert budget >= 2
    broken = set(early[:budget])
    fleet.health = lambda name: State.ERROR if name in broken else State.READY
    d2.step()
    d2.step()
    d2.step(15)
    d2.step()
    assert d2.phase() is Phase.SOAKING, "exactly the budget is fine"
    fleet.set(early[budget], State.ERROR)
    d2.step(1, reconcile=False)
    assert d2.phase() is Phase.HALTED


def test_min_upgraded_holds_the_wave_until_enough_upgraded() -> None:
    fleet = Fleet(canary=0)
    d = _driver(fleet, waves=_waves(canary={"minUpgraded": 1}))
    d.step()
    d.step(60)
    assert d.phase() is Phase.PROGRESSING and d.run.status.frontier.wave == 0, (
        "an empty canary proves nothing"
    )
    fleet.members["canary-late"] = Member("canary-late", dict(CANARY), FROM, State.READY)
    d.step()
    d.step()
    assert d.phase() is Phase.SOAKING


def test_waiting_kymas_do_not_block_and_a_late_failure_still_halts() -> None:
    fleet = Fleet()
    fleet.waiting = {"canary-1"}
    d = _driver(fleet)
    d.step()
    d.step()
    assert d.phase() is Phase.SOAKING and d.run.status.waves[0].waiting == 1
    d.step(15)
    assert d.run.status.frontier.wave == 1, "the next wave went without waiting for the window"
    # its window comes: it upgrades and fails -> halts against the canary budget
    fleet.waiting.clear()
    fleet.health = lambda name: State.ERROR if name == "canary-1" else State.READY
    d.step(1)
    assert d.phase() is Phase.HALTED and d.run.status.halt_reason is not None
    assert d.run.status.halt_reason.startswith("wave canary: 1 failed")


def test_manual_approval_waits_for_the_wave_name_in_approved_waves() -> None:
    d = _driver(waves=_waves(early={"approval": "Manual"}))
    d.step()
    d.step()
    d.step(15)
    assert d.phase() is Phase.AWAITING_APPROVAL and d.last_event() is EventReason.AWAITING_APPROVAL
    assert d.run.status.frontier.wave == 1 and d.run.status.frontier.threshold == 0.0
    d.step(600)
    assert d.phase() is Phase.AWAITING_APPROVAL and d.events.count(EventReason.AWAITING_APPROVAL) == 1
    assert all(m.version == FROM for n, m in d.fleet.members.items() if not n.startswith("canary"))
    d.edit(approved_waves=["early"])
    d.step()
    assert d.phase() is Phase.PROGRESSING and d.last_event() is EventReason.WAVE_RELEASED


def test_pause_freezes_the_frontier_and_a_failure_still_halts() -> None:
    d = _driver()
    d.step()
    d.step()
    d.edit(state="Paused")
    d.step(60)
    assert d.phase() is Phase.PAUSED and d.run.status.frontier.wave == 0
    assert d.last_event() is EventReason.PAUSED
    d.edit(state="Running")
    d.step()
    assert d.events[-3:] == [EventReason.RESUMED, EventReason.WAVE_SOAKED, EventReason.WAVE_RELEASED]
    assert d.run.status.frontier.wave == 1
    d.edit(state="Paused")
    d.fleet.health = lambda name: State.ERROR
    d.step(1)
    assert d.phase() is Phase.HALTED, "a paused rollout still halts on failures of released Kymas"


def test_halt_vs_revert() -> None:
    def broken_canary(name: str) -> State:
        return State.ERROR if name == "canary-0" else State.READY

    halting = Fleet()
    halting.health = broken_canary
    h = _driver(halting)
    h.step()
    h.step()
    assert h.phase() is Phase.HALTED and h.run.status.revert is None
    h.step(1)
    assert halting.members["canary-0"].version == TO, "halt keeps what was upgraded"

    reverting = Fleet()
    reverting.health = broken_canary
    r = _driver(reverting, onFailure="Revert")
    r.step()
    r.step()
    assert r.phase() is Phase.REVERTING and r.last_event() is EventReason.REVERT_STARTED
    assert r.run.status.revert is not None and r.run.status.revert.wave == 0
    r.step(1)  # the Kymas reconcile: back to fromVersion, Ready
    assert all(m.version == FROM for m in reverting.members.values())
    r.step()
    assert r.phase() is Phase.REVERTED and r.last_event() is EventReason.REVERTED


def test_a_revert_that_does_not_become_ready_halts() -> None:
    fleet = Fleet()
    fleet.health = lambda name: State.ERROR if name == "canary-0" else State.READY
    d = _driver(fleet, onFailure="Revert")
    d.step()
    d.step()
    assert d.phase() is Phase.REVERTING
    fleet.members["canary-0"] = Member("canary-0", dict(CANARY), FROM, State.ERROR)  # reverted, broken
    d.step(10, reconcile=False)
    assert d.phase() is Phase.HALTED
    assert (d.run.status.halt_reason or "").startswith("revert did not become Ready")


def test_revert_unavailable_halts_instead() -> None:
    fleet = Fleet()
    fleet.health = lambda name: State.ERROR if name == "canary-0" else State.READY
    rollout = run(
        {
            "conditions": [
                {
                    "type": "RevertUnavailable",
                    "status": "True",
                    "reason": "TemplateGone",
                    "message": "ModuleTemplate serverless-1.4.0 not found",
                    "lastTransitionTime": "2026-11-25T07:00:00Z",
                }
            ]
        },
        onFailure="Revert",
    )
    d = Driver(rollout, fleet)
    d.step()
    d.step()
    assert d.phase() is Phase.HALTED and d.run.status.revert is None


def test_resume_with_ignored_kymas_needs_a_spec_change() -> None:
    fleet = Fleet()
    fleet.health = lambda name: State.ERROR if name == "canary-0" else State.READY
    d = _driver(fleet)
    d.step()
    d.step()
    assert d.phase() is Phase.HALTED
    fleet.set("canary-0", State.READY)  # recovers by itself: the halt stays
    d.step(1, reconcile=False)
    assert d.phase() is Phase.HALTED
    fleet.set("canary-0", State.ERROR)
    d.edit(ignored_kymas=["canary-0"])
    d.step()
    assert d.phase() is Phase.SOAKING and EventReason.RESUMED in d.events
    assert d.run.status.waves[0].failed == 0 and d.run.status.failed_kymas == []
    d.step(15)
    assert d.run.status.frontier.wave == 1


def test_abort_is_terminal_and_holds_everyone() -> None:
    d = _driver()
    d.step()
    d.edit(state="Aborted")
    d.step()
    assert d.phase() is Phase.ABORTED and d.last_event() is EventReason.ABORTED
    d.step(60)
    assert d.phase() is Phase.ABORTED and d.events.count(EventReason.ABORTED) == 1


def test_max_concurrency_releases_in_steps() -> None:
    fleet = Fleet(canary=0, others=200)
    fleet.health = lambda name: State.PROCESSING
    d = _driver(
        fleet,
        waves=[
            {"name": "all", "upToPercent": 100, "progressDeadline": "10m", "maxConcurrency": 5},
        ],
    )
    d.step()
    d.step()
    upgraded = [n for n, m in fleet.members.items() if m.version == TO]
    assert len(upgraded) == 5 and len(d.run.status.frontier_steps) == 1
    fleet.health = lambda name: State.READY
    for name in upgraded:
        fleet.set(name, State.READY)
    d.step(1)
    assert len(d.run.status.frontier_steps) == 2
    d.step()
    assert sum(1 for m in fleet.members.values() if m.version == TO) == 10
    for _ in range(60):
        d.step(1)
        if d.phase() is Phase.COMPLETED:
            break
    assert d.phase() is Phase.COMPLETED and all(m.version == TO for m in fleet.members.values())


def test_observe_reads_informer_objects() -> None:
    kyma = {
        "metadata": {"name": "k1", "labels": dict(CANARY)},
        "status": {"modules": [{"name": "serverless", "state": "Ready", "maintenance": True}]},
    }
    manifest: dict[str, Any] = {
        "metadata": {"generation": 3},
        "spec": {"version": TO},
        "status": {"state": "Ready", "observedGeneration": 2, "lastOperation": {"operation": "ok"}},
    }
    member = observe(kyma, manifest, "serverless")
    assert (member.name, member.version, member.state, member.waiting) == ("k1", TO, None, True)
    manifest["status"]["observedGeneration"] = 3
    assert observe(kyma, manifest, "serverless").state is State.READY
    assert observe(kyma, None, "serverless") == Member("k1", dict(CANARY), waiting=True)


def test_kymas_in_wave_helper_agrees_with_the_fleet() -> None:
    rollout = run()
    names = kymas_in_wave(rollout, 2, 3)
    fleet = Fleet(canary=0, others=0)
    for name in names:
        fleet.members[name] = Member(name, {}, FROM, State.READY)
    assert fleet.wave(rollout, 2) == names
