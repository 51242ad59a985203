"""ModuleRolloutPolicy / ModuleRollout models: durations, int-or-percent, the policy rules of
docs/rollouts.md §4 (every bad policy rejected with a message naming it), run names, and that the
CRD's frozen policy schema is the policy CRD's spec schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from kyma_operator.api import names
from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.modulerollout import (
    ModuleRollout,
    ModuleRolloutPolicy,
    ModuleRolloutPolicySpec,
    OnFailure,
    Phase,
    RevertScope,
    RolloutState,
    Wave,
    parse_duration,
    rollout_name,
    scaled,
)
from tests.controlplane.crds import SAMPLES_DIR, crd_documents, load_documents

GATED = load_documents(SAMPLES_DIR / "rollout-policy-gated.yaml")[0]


def _spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = copy.deepcopy(GATED["spec"])
    spec.update(changes)
    return spec


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10m", 600.0), ("1h30m", 5400.0), ("45s", 45.0), ("0s", 0.0), ("2h", 7200.0), ("None", None)],
)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "1d", "m10", "10m1h", "-1s", "none", "1.5h"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "total", "down", "up"),
    [
        (3, 50, 3, 3),
        ("1%", 499, 4, 5),
        ("10%", 10, 1, 1),
        ("0%", 7, 0, 0),
        ("100%", 7, 7, 7),
        ("25%", 3, 0, 1),
    ],
)
def test_int_or_percent_scaling(value: int | str, total: int, down: int, up: int) -> None:
    assert scaled(value, total) == down
    assert scaled(value, total, round_up=True) == up


@pytest.mark.parametrize("value", [-1, "101%", "5", "5 %", "x%", True])
def test_bad_int_or_percent_is_refused(value: object) -> None:
    with pytest.raises(ValidationError):
        Wave.model_validate({"name": "w", "upToPercent": 100, "maxFailures": value})


def test_gated_sample_parses_with_its_defaults() -> None:
    policy = ModuleRolloutPolicy.from_object(GATED)
    spec = policy.spec
    assert spec.selects("serverless", "regular") and spec.selects("keda", "mandatory")
    assert not spec.selects("serverless", "experimental")
    assert spec.on_failure is OnFailure.REVERT and spec.effective_revert_scope() is RevertScope.FAILED_WAVE
    canary, early, half, rest = spec.waves
    assert canary.selector is not None and canary.selector.matches({names.ROLLOUT_RING_LABEL: "canary"})
    assert (canary.deadline_seconds(), canary.soak_seconds(), canary.min_upgraded) == (600.0, 900.0, 1)
    assert early.max_failures == "1%" and early.up_to_percent == 10
    assert half.approval == "Manual"
    assert rest.soak_seconds() == 0.0 and rest.max_concurrency == "25%"
    assert spec.seed("serverless") == "serverless"
    assert ModuleRolloutPolicySpec.model_validate(_spec(waveSeed="s")).seed("serverless") == "s"


def test_wave_defaults_are_the_crds() -> None:
    wave = Wave.model_validate({"name": "all", "upToPercent": 100})
    assert wave.deadline_seconds() is None  # no deadline, OCM's default
    assert (wave.soak_seconds(), wave.max_failures, wave.min_upgraded, wave.max_concurrency) == (
        0.0,
        0,
        0,
        None,
    )
    (policy_crd,) = crd_documents(["modulerolloutpolicies"])
    wave_schema = policy_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["waves"]["items"]["properties"]
    defaults = {key: value["default"] for key, value in wave_schema.items() if "default" in value}
    assert defaults == {
        "minUpgraded": 0,
        "progressDeadline": "None",
        "soakTime": "0s",
        "maxFailures": 0,
        "approval": "Automatic",
    }
    assert Wave.model_validate({"name": "all", "upToPercent": 100, **defaults}) == wave


BAD_POLICIES: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown wave field",
        _spec(waves=[{"name": "all", "upToPercent": 100, "maxSurge": 3}]),
        "maxSurge",
    ),
    (
        "upToPercent not increasing",
        _spec(
            waves=[
                {"name": "a", "upToPercent": 50},
                {"name": "b", "upToPercent": 50},
                {"name": "c", "upToPercent": 100},
            ]
        ),
        "must be greater than",
    ),
    (
        "last wave not 100",
        _spec(waves=[{"name": "a", "upToPercent": 10}, {"name": "b", "upToPercent": 90}]),
        "last wave",
    ),
    ("only selector waves", _spec(waves=[GATED["spec"]["waves"][0]]), "last wave"),
    (
        "duplicate wave names",
        _spec(waves=[{"name": "a", "upToPercent": 10}, {"name": "a", "upToPercent": 100}]),
        "used twice",
    ),
    (
        "selector wave after a percentage wave",
        _spec(
            waves=[
                {"name": "a", "upToPercent": 10},
                GATED["spec"]["waves"][0],
                {"name": "b", "upToPercent": 100},
            ]
        ),
        "comes after a percentage wave",
    ),
    ("revertScope without Revert", _spec(onFailure="Halt", revertScope="AllUpgraded"), "revertScope needs"),
    (
        "selector and percentage in one wave",
        _spec(waves=[{**GATED["spec"]["waves"][0], "upToPercent": 100}]),
        "exactly one of selector or upToPercent",
    ),
    (
        "neither selector nor percentage",
        _spec(waves=[{"name": "a"}]),
        "exactly one of selector or upToPercent",
    ),
    ("no waves", _spec(waves=[]), "waves"),
    ("no modules", _spec(modules=[]), "modules"),
    (
        "bad deadline",
        _spec(waves=[{"name": "a", "upToPercent": 100, "progressDeadline": "10 minutes"}]),
        "duration",
    ),
    ("endless soak", _spec(waves=[{"name": "a", "upToPercent": 100, "soakTime": "None"}]), "finite"),
    (
        "zero concurrency",
        _spec(waves=[{"name": "a", "upToPercent": 100, "maxConcurrency": "0%"}]),
        "at least one",
    ),
    ("unknown onFailure", _spec(onFailure="Retry"), "onFailure"),
    ("wave name not a DNS label", _spec(waves=[{"name": "Rest", "upToPercent": 100}]), "name"),
]


@pytest.mark.parametrize(("case", "spec", "message"), BAD_POLICIES, ids=[c[0] for c in BAD_POLICIES])
def test_bad_policies_are_rejected_with_a_clear_message(
    case: str, spec: dict[str, Any], message: str
) -> None:
    doc = {**GATED, "spec": spec}
    before = copy.deepcopy(doc)
    with pytest.raises(InvalidObjectError, match=message):
        ModuleRolloutPolicy.from_object(doc)
    assert doc == before, "validation changes nothing"


def _run(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": names.MODULE_ROLLOUT.api_version,
        "kind": "ModuleRollout",
        "metadata": {"name": "serverless-regular-1.5.0", "namespace": "kcp-system"},
        "spec": {
            "module": "serverless",
            "channel": "regular",
            "fromVersion": "1.4.0",
            "toVersion": "1.5.0",
            "policyRef": "gated",
            "policy": GATED["spec"],
            **spec,
        },
    }


def test_run_round_trips_and_defaults_to_running_progressing() -> None:
    doc = _run()
    run = ModuleRollout.from_object(doc)
    assert run.spec.state is RolloutState.RUNNING and run.phase() is Phase.PROGRESSING
    assert run.status.frontier.wave == 0 and run.status.frontier.threshold == 0.0
    assert run.to_object() == doc  # no invented defaults on output
    status = {
        "phase": "Halted",
        "frontier": {"wave": 0, "threshold": 1.0},
        "frontierSteps": [{"threshold": 1.0, "at": "2026-11-25T07:00:00Z"}],
        "haltedAt": "2026-11-25T07:01:12Z",
        "haltReason": "wave canary: 2 failed > maxFailures 0",
        "waves": [{"name": "canary", "members": 12, "releasedAt": "2026-11-25T07:00:00Z", "failed": 2}],
        "totals": {"members": 5000, "upgraded": 12, "held": 4988, "switchedIn": 0},
        "failedKymas": ["kyma-0007", "kyma-0012"],
        "revert": {"scope": "FailedWave", "wave": 0, "startedAt": "2026-11-25T07:01:12Z"},
    }
    halted = ModuleRollout.from_object({**doc, "status": status})
    assert halted.phase() is Phase.HALTED and halted.status.revert is not None
    assert halted.to_object()["status"] == status


def test_run_with_a_bad_frozen_policy_is_refused() -> None:
    with pytest.raises(InvalidObjectError, match=r"spec\.policy"):
        ModuleRollout.from_object(_run(policy=_spec(waves=[{"name": "a", "upToPercent": 50}])))
    with pytest.raises(InvalidObjectError, match="state"):
        ModuleRollout.from_object(_run(state="Stopped"))


def test_run_names_are_deterministic_and_fit() -> None:
    assert rollout_name("serverless", "regular", "1.5.0") == "serverless-regular-1.5.0"
    assert rollout_name("Serverless", "fast", "1.5.0+build_7") == "serverless-fast-1.5.0-build-7"
    long = rollout_name("m" * 60, "regular", "1.0.0")
    assert len(long) <= 63 and long == rollout_name("m" * 60, "regular", "1.0.0")
    assert long != rollout_name("m" * 60, "regular", "1.0.1")


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def test_the_runs_frozen_policy_schema_is_the_policy_spec_schema() -> None:
    (policy_crd,) = crd_documents(["modulerolloutpolicies"])
    (run_crd,) = crd_documents(["modulerollouts"])
    policy_spec = policy_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    frozen = run_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "policy"
    ]
    frozen = copy.deepcopy(frozen)
    immutable = {"rule": "self == oldSelf", "message": "is immutable"}
    frozen["x-kubernetes-validations"].remove(immutable)
    assert _strip_descriptions(frozen) == _strip_descriptions(policy_spec)
