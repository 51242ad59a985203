"""`kyma module rollout`: rows, the halt line, exit codes and what pause/resume/abort write (pure)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kyma_operator.api import names
from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.cli import rolloutview as view
from kyma_operator.cli.errors import CliError
from kyma_operator.cli.main import app
from kyma_operator.cli.rollout import RolloutFailing, Selection, plan_abort, plan_pause, plan_resume, select

NOW = datetime.datetime(2026, 11, 25, 7, 10, tzinfo=datetime.UTC)
HALT_REASON = (
    "wave canary: 2 failed > maxFailures 0 (kyma-0007: Manifest Error: Deployment serverless-ctrl not "
    "available; kyma-0012: not Ready within progressDeadline 10m)"
)


def run_object(
    phase: str = "Progressing", name: str = "serverless-regular-1.5.0", **status: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "operator.kyma-project.io/v1alpha1",
        "kind": "ModuleRollout",
        "metadata": {
            "name": name,
            "namespace": "kcp-system",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-25T07:00:00Z",
        },
        "spec": {
            "module": "serverless",
            "channel": "regular",
            "fromVersion": "1.4.0",
            "toVersion": "1.5.0",
            "policyRef": "default-gated",
            "state": status.pop("state", "Running"),
            "ignoredKymas": status.pop("ignoredKymas", []),
            "approvedWaves": status.pop("approvedWaves", []),
            "policy": {
                "modules": [{"name": "serverless", "channels": ["regular"]}],
                "waves": [
                    {"name": "canary", "selector": {"matchLabels": {names.ROLLOUT_RING_LABEL: "canary"}}},
                    {"name": "early", "upToPercent": 10, "maxFailures": "1%"},
                    {"name": "half", "upToPercent": 50, "approval": "Manual"},
                    {"name": "rest", "upToPercent": 100},
                ],
            },
        },
        "status": {"phase": phase, **status},
    }


def run(phase: str = "Progressing", **status: Any) -> ModuleRollout:
    return ModuleRollout.from_object(run_object(phase, **status))


def halted(**extra: Any) -> ModuleRollout:
    return run(
        "Halted",
        frontier={"wave": 0, "threshold": 1.0},
        haltReason=HALT_REASON,
        failedKymas=["kyma-0007", "kyma-0012"],
        totals={"members": 5000, "upgraded": 12, "ready": 10, "failed": 2, "held": 4988},
        waves=[{"name": "canary", "members": 12, "upgraded": 12, "ready": 10, "failed": 2}],
        **extra,
    )


def test_the_halt_line_names_the_run_the_wave_and_the_reason_once() -> None:
    assert view.halt_line(halted()) == (
        "rollout serverless-regular-1.5.0 halted in wave canary: 2 failed > maxFailures 0 (kyma-0007: "
        "Manifest Error: Deployment serverless-ctrl not available; kyma-0012: not Ready within "
        "progressDeadline 10m)"
    )
    reverting = run(
        "Reverting",
        frontier={"wave": 1, "threshold": 1.0},
        revert={"scope": "FailedWave", "wave": 1, "startedAt": "2026-11-25T07:05:00Z"},
        haltReason="wave early: 6 failed > maxFailures 4 (kyma-0100: Manifest Error: boom\nsecond line)",
    )
    assert view.halt_line(reverting) == (
        "rollout serverless-regular-1.5.0 reverting in wave early: 6 failed > maxFailures 4 "
        "(kyma-0100: Manifest Error: boom second line)"
    )
    assert view.halt_line(run("Reverted", revert={"scope": "FailedWave", "wave": 0, "startedAt": NOW})) == (
        "rollout serverless-regular-1.5.0 reverted in wave canary: no reason recorded"
    )


@pytest.mark.parametrize(
    ("phases", "code"),
    [
        (["Progressing"], 0),
        (["Soaking", "Paused", "AwaitingApproval"], 0),
        (["Completed", "Aborted", "Superseded", "Invalid"], 0),
        (["Halted"], 1),
        (["Reverting"], 1),
        (["Completed", "Reverted"], 1),
        (["Progressing", "Halted", "Completed"], 1),
    ],
)
def test_the_worst_run_decides_the_exit_code(phases: list[str], code: int) -> None:
    runs = [run(phase) for phase in phases]
    assert view.exit_code(runs) == code
    assert len(view.failing_lines(runs)) == sum(p in ("Halted", "Reverting", "Reverted") for p in phases)


def test_rows_show_phase_wave_counts_and_age() -> None:
    row = view.run_row(halted(), NOW)
    assert row == {
        "rollout": "serverless-regular-1.5.0",
        "phase": "Halted",
        "wave": "canary",
        "upgraded": "12/5000",
        "ready": 10,
        "failed": 2,
        "waiting": 0,
        "held": 4988,
        "age": "10m",
    }
    waves = view.wave_rows(run("Progressing", frontier={"wave": 1, "threshold": 0.25}))
    assert [(w["wave"], w["released"], w["members"]) for w in waves] == [
        ("canary", "yes", "-"),
        ("early", "25% of the wave", "-"),
        ("half", "no", "-"),
        ("rest", "no", "-"),
    ]
    assert [
        w["released"] for w in view.wave_rows(run("Completed", frontier={"wave": 3, "threshold": 1}))
    ] == ["yes"] * 4
    assert view.age(NOW - datetime.timedelta(seconds=42), NOW) == "42s"
    assert view.age(NOW - datetime.timedelta(hours=50), NOW) == "2d"
    assert view.age(None, NOW) == "-"


def test_the_phase_says_when_the_leader_has_not_acted_on_a_command_yet() -> None:
    assert view.run_row(run("Progressing", state="Paused"), NOW)["phase"] == "Progressing (pausing)"
    assert view.run_row(run("Paused", state="Running"), NOW)["phase"] == "Paused (resuming)"
    assert view.run_row(run("Halted", state="Aborted"), NOW)["phase"] == "Halted (aborting)"
    assert view.run_row(run("Paused", state="Paused"), NOW)["phase"] == "Paused"


def test_watch_lines_and_when_a_watch_ends() -> None:
    line = view.watch_line(halted(), NOW)
    assert line == (
        "07:10:00 rollout serverless-regular-1.5.0 Halted wave canary (1/4) upgraded 12/5000 ready 10 "
        "failed 2 waiting 0 held 4988"
    )
    assert view.watch_done([halted(), run("Completed")])
    assert not view.watch_done([halted(), run("Soaking")])
    assert not view.watch_done([run("Reverting")])  # a revert is still moving
    assert not view.watch_done([])


def test_documents_are_spec_and_status_as_stored() -> None:
    obj = run_object("Soaking", soakStartedAt="2026-11-25T07:05:00Z")
    doc = view.document(obj)
    assert doc["name"] == "serverless-regular-1.5.0" and doc["namespace"] == "kcp-system"
    assert doc["spec"] is obj["spec"] and doc["status"] == {
        "phase": "Soaking",
        "soakStartedAt": "2026-11-25T07:05:00Z",
    }
    assert set(doc) == {"name", "namespace", "spec", "status"}


def test_selection_by_module_channel_and_name() -> None:
    objects = [
        run_object("Completed", name="serverless-regular-1.4.0"),
        run_object(name="serverless-regular-1.5.0"),
        {**run_object(name="serverless-fast-1.6.0"), "spec": {**run_object()["spec"], "channel": "fast"}},
    ]
    by_module = select(objects, Selection("kcp-system", module="serverless"))
    assert [r.name for r, _ in by_module] == [
        "serverless-fast-1.6.0",
        "serverless-regular-1.4.0",
        "serverless-regular-1.5.0",
    ]
    assert [r.name for r, _ in select(objects, Selection("kcp-system", "serverless", "regular"))] == [
        "serverless-regular-1.4.0",
        "serverless-regular-1.5.0",
    ]
    assert [r.name for r, _ in select(objects, Selection("kcp-system", rollout="serverless-fast-1.6.0"))] == [
        "serverless-fast-1.6.0"
    ]
    assert select(objects, Selection("kcp-system", module="eventing")) == []


def test_pause_writes_the_state_and_the_reason_with_the_resource_version() -> None:
    change = plan_pause(run("Soaking"), "investigating ticket 4711")
    assert change.patch == {
        "metadata": {
            "resourceVersion": "42",
            "annotations": {names.STATE_REASON_ANNOTATION: "investigating ticket 4711"},
        },
        "spec": {"state": "Paused"},
    }
    assert plan_pause(run("Paused", state="Paused"), None).patch is None  # nothing to change: no write
    with pytest.raises(CliError, match="is Completed: nothing to pause"):
        plan_pause(run("Completed"), None)


def test_abort_is_terminal_and_idempotent() -> None:
    change = plan_abort(halted(), None)
    assert change.patch is not None and change.patch["spec"] == {"state": "Aborted"}
    assert "aborted with" in change.patch["metadata"]["annotations"][names.STATE_REASON_ANNOTATION]
    assert plan_abort(run("Aborted", state="Aborted"), "again").patch is None
    with pytest.raises(CliError, match="is Superseded: nothing to abort"):
        plan_abort(run("Superseded"), None)


def test_resume_of_a_halted_run_needs_ignore_failed() -> None:
    with pytest.raises(RolloutFailing) as refused:
        plan_resume(halted(), False, "kcp-system")
    assert str(refused.value) == view.halt_line(halted())
    assert refused.value.hint.startswith(
        "hint: `kyma module rollout resume --rollout serverless-regular-1.5.0 -n kcp-system --ignore-failed`"
    )
    change = plan_resume(halted(ignoredKymas=["kyma-0001"]), True, "kcp-system")
    assert change.patch is not None
    assert change.patch["spec"] == {
        "ignoredKymas": ["kyma-0001", "kyma-0007", "kyma-0012"],
        "state": "Running",
    }
    assert "2 failed Kyma(s) exempted" in change.message


def test_resume_unpauses_approves_a_manual_wave_and_otherwise_writes_nothing() -> None:
    assert plan_resume(run("Paused", state="Paused"), False, "kcp-system").patch == {
        "metadata": {
            "resourceVersion": "42",
            "annotations": {names.STATE_REASON_ANNOTATION: "resumed with `kyma module rollout resume`"},
        },
        "spec": {"state": "Running"},
    }
    approval = plan_resume(run("AwaitingApproval", frontier={"wave": 2, "threshold": 0}), False, "kcp-system")
    assert approval.patch is not None and approval.patch["spec"] == {
        "approvedWaves": ["half"],
        "state": "Running",
    }
    assert approval.message == "rollout serverless-regular-1.5.0 resumed: wave half approved"
    assert plan_resume(run("Soaking"), False, "kcp-system").patch is None
    with pytest.raises(CliError, match="was aborted"):
        plan_resume(run("Progressing", state="Aborted"), False, "kcp-system")


def test_steering_commands_need_a_module_or_a_rollout() -> None:
    for command in ("pause", "resume", "abort"):
        result = CliRunner().invoke(app, ["module", "rollout", command, "--kubeconfig", "/dev/null"])
        assert result.exit_code == 2, result.output
        assert "name a MODULE or --rollout NAME" in result.output


def test_every_rollout_flag_has_help() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    module = root.commands["module"]
    assert isinstance(module, typer.core.TyperGroup)
    group = module.commands["rollout"]
    assert isinstance(group, typer.core.TyperGroup)
    assert set(group.commands) == {"status", "pause", "resume", "abort"}
    for name, command in group.commands.items():
        assert command.help, name
        for param in command.params:
            assert getattr(param, "help", None), f"{name}: {param.name} has no help"


def kyma_object(name: str, labels: dict[str, str], installed: str | None = "1.4.0") -> dict[str, Any]:
    modules = [{"name": "serverless", "state": "Ready", "version": installed}] if installed else []
    return {"metadata": {"name": name, "labels": labels}, "status": {"modules": modules}}


CANARY = kyma_object("kyma-canary", {names.ROLLOUT_RING_LABEL: "canary"})


def _hashed_into(wave: int) -> dict[str, Any]:
    from kyma_operator.rollouts.waves import placement_of_object

    for index in range(1000):
        obj = kyma_object(f"kyma-{index}", {names.RUNTIME_ID_LABEL: f"rt-{index}"})
        if placement_of_object(run(), obj).wave == wave:
            return obj
    raise AssertionError(f"no Kyma hashed into wave {wave}")


@pytest.mark.parametrize(
    ("phase", "status", "kyma", "released", "gets", "reason"),
    [
        (
            "Progressing",
            {"frontier": {"wave": 0, "threshold": 1}},
            "canary",
            "yes",
            "1.5.0",
            "released in wave canary (1/4): upgrades to 1.5.0",
        ),
        (
            "Progressing",
            {"frontier": {"wave": 0, "threshold": 1}},
            "rest",
            "no",
            "1.4.0",
            "held: wave rest (4/4) not released yet (the rollout is in wave canary); keeps 1.4.0",
        ),
        (
            "Paused",
            {"frontier": {"wave": 1, "threshold": 1}, "state": "Paused"},
            "rest",
            "no",
            "1.4.0",
            "held: wave rest (4/4) not released, the rollout is paused; keeps 1.4.0",
        ),
        (
            "AwaitingApproval",
            {"frontier": {"wave": 2, "threshold": 0}},
            "half",
            "no",
            "1.4.0",
            "held: wave half (3/4) awaits manual approval (`kyma module rollout resume`); keeps 1.4.0",
        ),
        (
            "Progressing",
            {"frontier": {"wave": 3, "threshold": 0.25}},
            "held-rest",
            "no",
            "1.4.0",
            "held: wave rest (4/4) is released in steps (maxConcurrency), 25% of it so far; keeps 1.4.0",
        ),
        (
            "Halted",
            {"frontier": {"wave": 0, "threshold": 1}},
            "rest",
            "no",
            "1.4.0",
            "held: the rollout halted in wave canary; keeps 1.4.0",
        ),
        (
            "Halted",
            {"frontier": {"wave": 0, "threshold": 1}},
            "canary",
            "yes",
            "1.4.0",
            "released in wave canary (1/4) before the rollout stopped (Halted): keeps what it has",
        ),
        (
            "Completed",
            {"frontier": {"wave": 3, "threshold": 1}},
            "rest",
            "yes",
            "1.5.0",
            "not held: the rollout is Completed, the channel's version applies",
        ),
    ],
)
def test_one_kymas_wave_and_why(
    phase: str, status: dict[str, Any], kyma: str, released: str, gets: str, reason: str
) -> None:
    from kyma_operator.cli.rolloutkyma import kyma_row

    obj = {"canary": CANARY, "half": _hashed_into(2), "rest": _hashed_into(3), "held-rest": _hashed_into(3)}[
        kyma
    ]
    if kyma == "held-rest":  # a Kyma of the last wave the 25 % threshold has not reached yet
        from kyma_operator.rollouts.waves import placement_of_object

        obj = next(
            o
            for o in (kyma_object(f"k-{i}", {names.RUNTIME_ID_LABEL: f"r-{i}"}) for i in range(2000))
            if (p := placement_of_object(run(), o)).wave == 3 and p.order >= 0.25
        )
    row = kyma_row(run(phase, **status), obj)
    assert (row["released"], row["gets"], row["reason"]) == (released, gets, reason)


def test_a_reverting_run_takes_its_wave_back() -> None:
    from kyma_operator.cli.rolloutkyma import kyma_row

    reverting = run(
        "Reverting",
        frontier={"wave": 0, "threshold": 1},
        revert={"scope": "FailedWave", "wave": 0, "startedAt": "2026-11-25T07:05:00Z"},
    )
    row = kyma_row(reverting, kyma_object("kyma-canary", {names.ROLLOUT_RING_LABEL: "canary"}, "1.5.0"))
    assert (row["gets"], row["reason"]) == (
        "1.4.0",
        "in the revert scope: goes back to 1.4.0 (recorded on the run)",
    )


def test_watch_redraws_in_place_on_a_terminal() -> None:
    import io

    from rich.console import Console

    from kyma_operator.cli.output import OutputFormat
    from kyma_operator.cli.rollout import Redraw

    screen = io.StringIO()
    redraw = Redraw(OutputFormat.TABLE, None, Console(file=screen, force_terminal=True, width=120))
    try:
        for obj in (run_object("Progressing", frontier={"wave": 1, "threshold": 1}), run_object("Halted")):
            redraw.draw([(ModuleRollout.from_object(obj), obj)])
    finally:
        redraw.close()
    text = screen.getvalue()
    assert "\x1b[" in text  # cursor movement: the table is redrawn in place, not appended
    assert "Progressing" in text and "Halted" in text and "WAVE" in text and "canary" in text
