"""``target()``: the table of docs/rollouts.md §6.4 row by row, the user's channel switch (§8.2)
and the revert scope (§8.5); which policy governs a change and which run is in force."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kyma_operator.api.modulerollout import ModuleRollout, ModuleRolloutPolicy
from kyma_operator.rollouts.lookup import RunIndex
from kyma_operator.rollouts.selection import choose_policy, run_in_force
from kyma_operator.rollouts.target import Governed, Reason, Target, target
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


def _policy(name: str, priority: int, modules: list[dict[str, Any]]) -> ModuleRolloutPolicy:
    return ModuleRolloutPolicy.from_object(
        {
            "metadata": {"name": name, "namespace": "kcp-system"},
            "spec": {
                "modules": modules,
                "priority": priority,
                "waves": [{"name": "all", "upToPercent": 100}],
            },
        }
    )


def test_the_highest_priority_policy_wins_ties_by_name() -> None:
    everything = _policy("b-all", 0, [{"name": "*", "channels": ["regular", "mandatory"]}])
    serverless = _policy("z-serverless", 10, [{"name": "serverless", "channels": ["regular"]}])
    tie = _policy("a-serverless", 10, [{"name": "serverless", "channels": ["regular"]}])
    policies = [everything, serverless, tie]
    assert choose_policy(policies, "serverless", "regular") is tie
    assert choose_policy(policies, "keda", "regular") is everything
    assert choose_policy(policies, "keda", "mandatory") is everything
    assert choose_policy(policies, "keda", "fast") is None


def test_the_run_in_force_is_the_newest_unfinished_one() -> None:
    def at(to_version: str, phase: str, channel: str = "regular") -> ModuleRollout:
        r = run({"phase": phase}, spec={"toVersion": to_version, "channel": channel})
        r.metadata.name = f"serverless-{channel}-{to_version}"
        return r

    older, newer = at("1.5.0", "Soaking"), at("1.10.0", "Progressing")
    done = at("1.11.0", "Completed")
    fast = at("1.12.0", "Progressing", channel="fast")
    assert run_in_force([older, newer, done, fast], "serverless", "regular") is newer
    assert run_in_force([older, done], "serverless", "regular") is older
    assert run_in_force([done, fast], "serverless", "regular") is None
    assert run_in_force([older], "keda", "regular") is None


def test_run_index_parses_once_per_resource_version_and_skips_invalid_runs() -> None:
    good = run(_status("Progressing")).to_object()
    good["metadata"]["resourceVersion"] = "1"
    bad = copy.deepcopy(good)
    bad["metadata"] |= {"name": "serverless-regular-1.6.0", "resourceVersion": "2"}
    bad["spec"] |= {"toVersion": "1.6.0"}
    bad["spec"]["policy"]["waves"][-1]["upToPercent"] = 90  # the last wave must be 100
    objects = [good, bad]
    index = RunIndex(lambda: objects)
    found = index("serverless", "regular")
    assert isinstance(found, ModuleRollout) and found.spec.to_version == "1.5.0", (
        "the invalid run holds nobody"
    )
    assert list(index.invalid) == ["kcp-system/serverless-regular-1.6.0"]
    assert index("serverless", "regular") is found, "not parsed again at the same resourceVersion"
    good["metadata"]["resourceVersion"] = "3"
    good["status"]["phase"] = "Completed"
    assert index("serverless", "regular") is None
    objects.clear()
    assert index.runs() == [] and index.invalid == {}


def test_run_index_with_policies_answers_governed() -> None:
    policy = _policy("gated", 0, [{"name": "serverless", "channels": ["regular"]}]).to_object()
    policy["metadata"]["resourceVersion"] = "1"
    current = run(_status("Progressing")).to_object()
    current["metadata"]["resourceVersion"] = "2"
    index = RunIndex(lambda: [current], lambda: [policy])
    found = index("serverless", "regular")
    assert isinstance(found, Governed) and found.policy == "gated" and found.run is not None
    assert found.run.name == RUN
    assert index("serverless", "fast") is None
    assert index("keda", "regular") is None


def test_a_governed_channel_that_moved_keeps_kymas_until_its_run_exists() -> None:
    waiting = Governed("gated")
    assert target(waiting, TO, {}, EARLY, FROM) == Target(FROM, Reason.AWAITING_RUN)
    assert target(waiting, TO, {}, EARLY, None) == Target(TO, Reason.CHANNEL), "first install: upstream"
    assert target(waiting, TO, {}, EARLY, TO) == Target(TO, Reason.CHANNEL), "nothing to hold"
    assert target(waiting, FROM, {}, EARLY, TO) == Target(FROM, Reason.CHANNEL), (
        "moved down: no-downgrade rule"
    )
    assert target(waiting, TO, {}, EARLY, FROM, switching=True) == Target(TO, Reason.CHANNEL)
    holding = Governed("gated", hold_channel_switches=True)
    assert target(holding, TO, {}, EARLY, FROM, switching=True) == Target(FROM, Reason.AWAITING_RUN)
    # an older finished run does not release the new version; the run of this version does
    done = run({"phase": "Completed"}, spec={"fromVersion": "1.3.0", "toVersion": FROM})
    assert target(Governed("gated", run=done), TO, {}, EARLY, FROM) == Target(FROM, Reason.AWAITING_RUN)
    assert target(Governed("gated", run=ROLLOUT), TO, {}, EARLY, FROM) == Target(TO, Reason.RELEASED, RUN)
    assert target(Governed("gated", run=ROLLOUT), TO, {}, REST, FROM) == Target(FROM, Reason.HELD)
