"""The rollout controller's pure parts: a status is written only when it changed (what the informer
holds, normalised as written), the halts counter's reason from the status, the Kyma's revert event."""

from __future__ import annotations

import datetime

from kyma_operator.api.meta import Condition, ConditionStatus
from kyma_operator.api.modulerollout import Frontier, ModuleRolloutStatus, Phase, Totals, WaveStatus
from kyma_operator.rollouts.controller import (
    counts_wait,
    halt_reason,
    module_reverted,
    status_body,
    written_status,
)

T0 = datetime.datetime(2026, 11, 25, 7, 0, tzinfo=datetime.UTC)


def test_a_status_read_back_compares_equal_to_the_one_written() -> None:
    status = ModuleRolloutStatus(
        phase=Phase.SOAKING, started_at=T0, frontier=Frontier(wave=1, threshold=1.0), soak_started_at=T0
    )
    body = status_body(status)
    assert body["startedAt"] == "2026-11-25T07:00:00Z" and "haltedAt" not in body
    # what the API server and the informer give back: the same JSON, extra keys in another order
    assert written_status({"status": dict(reversed(list(body.items())))}) == body
    moved = status.model_copy(update={"frontier": Frontier(wave=2, threshold=0.0)})
    assert status_body(moved) != body
    assert written_status({}) is None and written_status({"status": {"phase": "Nonsense"}}) is None


def test_the_halt_reason_label() -> None:
    def halted(reason: str, condition: str = "FailureBudgetExceeded") -> ModuleRolloutStatus:
        halted_condition = Condition(
            type="Halted",
            status=ConditionStatus.TRUE,
            reason=condition,
            message=reason,
            last_transition_time=T0,
        )
        return ModuleRolloutStatus(phase=Phase.HALTED, halt_reason=reason, conditions=[halted_condition])

    assert (
        halt_reason(halted("wave canary: 1 failed > maxFailures 0 (k0: Manifest Error: x)"))
        == "failure_budget"
    )
    deadline = "wave canary: 1 failed > maxFailures 0 (k0: not Ready within progressDeadline 20s)"
    assert halt_reason(halted(deadline)) == "progress_deadline"
    assert halt_reason(halted("revert did not become Ready", "RevertNotReady")) == "revert_failed"


def test_the_revert_event_goes_to_the_kyma() -> None:
    kyma = {"metadata": {"name": "k0", "namespace": "kcp-system", "uid": "u-1"}}
    target, event = module_reverted(kyma, "serverless", "serverless-regular-1.5.0", "1.4.0")
    assert target["kind"] == "Kyma" and target["metadata"] == {
        "name": "k0",
        "namespace": "kcp-system",
        "uid": "u-1",
    }
    assert (event.reason, event.warning) == ("ModuleRevertedByRollout", True)
    assert "1.4.0" in event.message and "serverless-regular-1.5.0" in event.message


def test_a_change_of_the_counts_alone_is_written_at_most_once_per_interval() -> None:
    wave = WaveStatus(name="canary", members=10, released_at=T0, upgraded=3, ready=2)
    before = ModuleRolloutStatus(started_at=T0, waves=[wave], totals=Totals(members=10, upgraded=3, ready=2))
    written = status_body(before)
    counts = before.model_copy(
        update={
            "waves": [wave.model_copy(update={"upgraded": 4, "ready": 3})],
            "totals": Totals(members=10, upgraded=4, ready=3),
            "failed_kymas": [],
        }
    )
    # counts only: held back until the interval since this replica's last write has passed
    assert counts_wait(written, status_body(counts), 100.0, 100.5, 2.0) == 1.5
    assert counts_wait(written, status_body(counts), 100.0, 102.0, 2.0) == 0.0
    assert counts_wait(written, status_body(counts), None, 100.5, 2.0) == 0.0  # no write of ours yet
    # a decision (soak started, frontier moved, a wave soaked, halted) is written at once
    for decision in (
        {"soak_started_at": T0},
        {"frontier": Frontier(wave=1, threshold=1.0)},
        {"waves": [wave.model_copy(update={"soaked_at": T0})]},
        {"phase": Phase.HALTED, "halt_reason": "wave canary: 1 failed > maxFailures 0"},
    ):
        assert counts_wait(written, status_body(counts.model_copy(update=decision)), 100.0, 100.1, 2.0) == 0.0
    assert counts_wait(written, written, 100.0, 100.1, 2.0) == 0.0  # nothing to write: no wait either
