"""``target()``: the table of docs/rollouts.md §6.4 row by row, the user's channel switch (§8.2)
and the revert scope (§8.5)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.rollouts.target import Reason, Target, target
from kyma_operator.rollouts.waves import placement
from tests.unit.kyma_operator.rollouts.runs import CANARY, kymas_in_wave, run

FROM, TO = "1.4.0", "1.5.0"
RUN = "serverless-regular-1.5.0"
# frontier: canary (0) and early (1) released, half (2) released below threshold 0.5, rest (3) held
FRONTIER = {"wave": 2, "threshold": 0.5}


def _status(phase: str, **extra: Any) -> dict[str, Any]:
    return {"phase": phase, "frontier": FRONTIER, **extra}


ROLLOUT = run(_status("Progressing"))
EARLY = kymas_in_wave(ROLLOUT, 1, 1)[0]
REST = kymas_in_wave(ROLLOUT, 3, 1)[0]
CANARY_KYMA = "kyma-canary"


def _released_in_half(released: bool) -> str:
    for name in kymas_in_wave(ROLLOUT, 2, 50):
        if (placement(ROLLOUT, {}, name).order < 0.5) == released:
            return name
    raise AssertionError("no such Kyma among 50")


HALF_IN, HALF_OUT = _released_in_half(True), _released_in_half(False)


def test_no_run_or_a_finished_one_is_the_channel_version() -> None:
    assert target(None, TO, {}, REST, FROM) == Target(TO, Reason.CHANNEL)
    for phase in ("Completed", "Invalid", "Superseded"):
        assert target(run(_status(phase)), TO, {}, REST, FROM) == Target(TO, Reason.CHANNEL), phase


def test_a_channel_that_moved_elsewhere_is_not_held_by_the_run() -> None:
    assert target(ROLLOUT, "1.6.0", {}, REST, FROM) == Target("1.6.0", Reason.CHANNEL)
    assert target(ROLLOUT, "1.3.0", {}, EARLY, TO) == Target("1.3.0", Reason.CHANNEL)


@pytest.mark.parametrize("phase", ["Progressing", "Soaking", "AwaitingApproval", "Paused"])
def test_released_kymas_get_the_new_version_while_the_run_is_active(phase: str) -> None:
    rollout = run(_status(phase))
    for labels, name in (({**CANARY}, CANARY_KYMA), ({}, EARLY), ({}, HALF_IN)):
        assert target(rollout, TO, labels, name, FROM) == Target(TO, Reason.RELEASED, RUN), name
    assert target(rollout, TO, {}, EARLY, None) == Target(TO, Reason.RELEASED, RUN), "first install too"


@pytest.mark.parametrize("phase", ["Progressing", "Soaking", "AwaitingApproval", "Paused"])
def test_kymas_not_released_keep_their_version_or_install_the_old_one(phase: str) -> None:
    rollout = run(_status(phase))
    for name in (HALF_OUT, REST):
        assert target(rollout, TO, {}, name, FROM) == Target(FROM, Reason.HELD), name
        assert target(rollout, TO, {}, name, "1.3.0") == Target("1.3.0", Reason.HELD), "a lagging Kyma too"
        assert target(rollout, TO, {}, name, None) == Target(FROM, Reason.HELD), "installs fromVersion"


@pytest.mark.parametrize("phase", ["Halted", "Aborted"])
def test_a_stopped_run_releases_nobody_and_takes_nothing_back(phase: str) -> None:
    rollout = run(_status(phase))
    assert target(rollout, TO, {}, EARLY, TO) == Target(TO, Reason.HELD, RUN), "upgraded keeps it"
    assert target(rollout, TO, {}, EARLY, FROM) == Target(FROM, Reason.HELD), "pending stays"
    assert target(rollout, TO, {}, REST, FROM) == Target(FROM, Reason.HELD)
    assert target(rollout, TO, {}, REST, None) == Target(FROM, Reason.HELD)


@pytest.mark.parametrize("phase", ["Reverting", "Reverted"])
def test_revert_takes_back_only_the_failed_waves_upgraded_kymas(phase: str) -> None:
    revert = {"scope": "FailedWave", "wave": 1, "startedAt": "2026-11-25T07:30:00Z"}
    rollout = run(_status(phase, revert=revert))
    back = target(rollout, TO, {}, EARLY, TO)
    assert back == Target(FROM, Reason.REVERT, RUN)
    assert back.allows_downgrade and back.reverted_by == RUN
    assert target(rollout, TO, {}, EARLY, FROM) == Target(FROM, Reason.HELD), "reverted: stays, no write"
    canary = target(rollout, TO, CANARY, CANARY_KYMA, TO)
    assert canary == Target(TO, Reason.HELD, RUN) and not canary.allows_downgrade, "a passed wave keeps it"
    assert target(rollout, TO, {}, HALF_IN, FROM) == Target(FROM, Reason.HELD), "frozen frontier"
    assert target(rollout, TO, {}, REST, TO) == Target(TO, Reason.HELD, RUN), "outside: e.g. switched in"


def test_revert_of_all_upgraded_waves() -> None:
    revert = {"scope": "AllUpgraded", "wave": 2, "startedAt": "2026-11-25T07:30:00Z"}
    rollout = run(_status("Reverting", revert=revert), onFailure="Revert", revertScope="AllUpgraded")
    for labels, name in ((CANARY, CANARY_KYMA), ({}, EARLY), ({}, HALF_IN)):
        assert target(rollout, TO, labels, name, TO) == Target(FROM, Reason.REVERT, RUN), name
    assert target(rollout, TO, {}, REST, TO) == Target(TO, Reason.HELD, RUN)


def test_a_users_channel_switch_is_not_held_unless_the_policy_says_so() -> None:
    assert target(ROLLOUT, TO, {}, REST, "1.3.0", switching=True) == Target(TO, Reason.SWITCH, RUN)
    assert target(ROLLOUT, TO, {}, REST, None, switching=True) == Target(TO, Reason.SWITCH, RUN)
    held = run(_status("Progressing"), holdChannelSwitches=True)
    assert target(held, TO, {}, REST, "1.3.0", switching=True) == Target("1.3.0", Reason.HELD)
    assert target(held, TO, {}, EARLY, "1.3.0", switching=True) == Target(TO, Reason.RELEASED, RUN)
    # after the switch the Kyma is an ordinary member: held at the version it switched to
    assert target(ROLLOUT, TO, {}, REST, TO) == Target(TO, Reason.HELD, RUN)
