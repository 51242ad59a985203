"""Maintenance window policy and gate: upstream's resolver cases (``maintwindow_test.go`` over
``testdata/ruleset-1.json``) and the gate's rules (``maintenance_window_test.go``)."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kyma_operator.api import names
from kyma_operator.api.kyma import Kyma, ModuleStatus, PartialMeta, TrackingObject
from kyma_operator.api.meta import State
from kyma_operator.api.moduletemplate import ModuleTemplate
from kyma_operator.controllers.kyma.maintenance import (
    METRIC_CONFIG_READ_SUCCESS,
    UNKNOWN_MESSAGE,
    WAITING_MESSAGE,
    MaintenanceWindows,
    Unknown,
    Waiting,
)
from kyma_operator.controllers.kyma.maintenancepolicy import (
    NoWindowFound,
    PolicyError,
    ResolvedWindow,
    Runtime,
    parse_policy,
)

# upstream maintenancewindows/resolver/testdata/ruleset-1.json (the part its cases use)
RULESET: dict[str, Any] = {
    "rules": [
        {
            "match": {"plan": "trial|free"},
            "windows": [
                {
                    "days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
                    "begin": "01:00:00Z",
                    "end": "01:00:00Z",
                }
            ],
        },
        {
            "match": {"region": "europe|eu-|uksouth"},
            "windows": [
                {"begin": "2024-10-10T20:00:00Z", "end": "2024-10-11T00:00:00Z"},
                {"begin": "2024-12-08T20:00:00Z", "end": "2024-12-09T00:00:00Z"},
            ],
        },
        {
            "match": {"globalAccountId": "sup-er-ga-case", "platformRegion": "super-mario"},
            "windows": [{"begin": "2024-10-10T20:00:00Z", "end": "2024-10-11T00:00:00Z"}],
        },
        {
            "match": {"region": "europe|eu-|uksouth"},
            "windows": [{"begin": "2024-12-18T20:00:00Z", "end": "2024-12-19T00:00:00Z"}],
        },
    ],
    "default": {"days": ["Sat"], "begin": "20:00:00Z", "end": "00:00:00Z"},
}


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def win(begin: str, end: str) -> ResolvedWindow:
    return ResolvedWindow(at(begin), at(end))


POLICY = parse_policy(json.dumps(RULESET))


def test_daily_window_of_a_matching_plan() -> None:
    # upstream "freetrials next"
    found = POLICY.resolve(Runtime(plan="trial"), at("2024-10-03T05:05:00Z"))
    assert found == win("2024-10-04T01:00:00+00:00", "2024-10-05T01:00:00+00:00")


def test_ongoing_windows_count_only_while_long_enough() -> None:
    runtime = Runtime(region="uksouth-vikings")
    now = at("2024-10-10T22:05:00Z")
    # upstream "ongoing" and "ongoing+minsize"
    assert POLICY.resolve(runtime, now, ongoing=True) == win("2024-10-10T20:00:00Z", "2024-10-11T00:00:00Z")
    assert POLICY.resolve(runtime, now, ongoing=True, min_duration=datetime.timedelta(hours=5)) == win(
        "2024-12-08T20:00:00Z", "2024-12-09T00:00:00Z"
    )


def test_first_match_only_or_every_matching_rule() -> None:
    runtime = Runtime(region="uksouth-vikings")
    now = at("2024-12-10T22:05:00Z")
    # upstream "not just first match"
    assert POLICY.resolve(runtime, now, first_match_only=False) == win(
        "2024-12-18T20:00:00Z", "2024-12-19T00:00:00Z"
    )
    # first match has nothing left: the default (Saturday 20:00 through midnight)
    assert POLICY.resolve(runtime, now) == win("2024-12-14T20:00:00Z", "2024-12-15T00:00:00Z")
    with pytest.raises(NoWindowFound):
        POLICY.resolve(runtime, now, fallback_default=False)


def test_any_matching_field_matches_and_keys_are_case_insensitive() -> None:
    # "globalAccountId" in the file is upstream's globalAccountID (Go decodes keys case-insensitively)
    found = POLICY.resolve(Runtime(global_account_id="sup-er-ga-case"), at("2024-10-01T00:00:00Z"))
    assert found == win("2024-10-10T20:00:00Z", "2024-10-11T00:00:00Z")
    found = POLICY.resolve(Runtime(platform_region="super-mario-east"), at("2024-10-01T00:00:00Z"))
    assert found == win("2024-10-10T20:00:00Z", "2024-10-11T00:00:00Z")


def test_unmatched_runtime_gets_the_default() -> None:
    found = POLICY.resolve(Runtime(region="asia"), at("2024-10-03T05:05:00Z"))  # a Thursday
    assert found == win("2024-10-05T20:00:00Z", "2024-10-06T00:00:00Z")


def test_empty_default_gives_no_window() -> None:
    policy = parse_policy('{"rules": [], "default": {}}')
    with pytest.raises(NoWindowFound, match="defaults also failed"):
        policy.resolve(Runtime(region="asia"), at("2024-10-03T05:05:00Z"))


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ("{", "not JSON"),
        ("[]", "policy: expected an object"),
        ('{"rules": {}}', "rules: expected a list"),
        ('{"rules": [{"match": {"region": "("}}]}', r"rules\[0\].match.region: invalid regular expression"),
        ('{"default": {"days": ["Monday"], "begin": "01:00:00Z", "end": "02:00:00Z"}}', "Monday"),
        ('{"default": {"begin": "tomorrow"}}', "default.begin: unable to parse 'tomorrow'"),
        ('{"default": {"begin": "2024-10-10T20:00:00"}}', "with a zone"),
        ('{"default": {"begin": 5}}', "default.begin: expected a string"),
    ],
)
def test_bad_policy_is_a_clear_error(document: str, problem: str) -> None:
    with pytest.raises(PolicyError, match=problem):
        parse_policy(document)


# -- the gate ----------------------------------------------------------------------------------


NOW = at("2026-11-25T06:00:00+00:00")


def kyma(region: str = "europe", *, skip: bool = False) -> Kyma:
    return Kyma.from_object(
        {
            "apiVersion": names.KYMA.api_version,
            "kind": names.KYMA.kind,
            "metadata": {"name": "k", "namespace": "kcp-system", "labels": {names.REGION_LABEL: region}},
            "spec": {"channel": "regular", "skipMaintenanceWindows": skip},
        }
    )


def template(version: str, *, downtime: bool = True) -> ModuleTemplate:
    return ModuleTemplate.from_object(
        {
            "apiVersion": names.MODULE_TEMPLATE.api_version,
            "kind": names.MODULE_TEMPLATE.kind,
            "metadata": {"name": f"m-{version}", "namespace": "kcp-system"},
            "spec": {"moduleName": "m", "version": version, "requiresDowntime": downtime, "data": {}},
        }
    )


INSTALLED = ModuleStatus(
    name="m",
    state=State.READY,
    version="1.0.0",
    manifest=TrackingObject(api_version="v", kind="Manifest", metadata=PartialMeta(name="x")),
)


def windows(policy: dict[str, Any] | None = None) -> MaintenanceWindows:
    """Upstream's e2e policy: asia now .. now+2h, europe tomorrow."""
    if policy is None:
        policy = {
            "rules": [
                {
                    "match": {"region": "asia"},
                    "windows": [{"begin": "2026-11-25T05:59:00Z", "end": "2026-11-25T08:00:00Z"}],
                },
                {
                    "match": {"region": "europe"},
                    "windows": [{"begin": "2026-11-26T06:00:00Z", "end": "2026-11-26T08:00:00Z"}],
                },
            ],
            "default": {},
        }
    return MaintenanceWindows(parse_policy(json.dumps(policy)), now=lambda: NOW)


def test_upgrade_waits_for_the_next_window_and_says_when() -> None:
    hold = windows().hold(kyma("europe"), template("2.0.0"), INSTALLED)
    assert isinstance(hold, Waiting)
    assert hold.wake_after == 24 * 3600
    assert hold.message.startswith(WAITING_MESSAGE)
    assert "1.0.0 -> 2.0.0" in hold.message and "2026-11-26T06:00:00Z - 2026-11-26T08:00:00Z" in hold.message


def test_no_wait_inside_a_window_for_skip_first_install_same_version_or_no_downtime() -> None:
    mw = windows()
    assert mw.hold(kyma("asia"), template("2.0.0"), INSTALLED) is None
    assert mw.hold(kyma("europe", skip=True), template("2.0.0"), INSTALLED) is None
    assert mw.hold(kyma("europe"), template("2.0.0"), None) is None
    never_installed = ModuleStatus(name="m", state=State.ERROR, message="template missing")
    assert mw.hold(kyma("europe"), template("2.0.0"), never_installed) is None
    assert mw.hold(kyma("europe"), template("1.0.0"), INSTALLED) is None
    assert mw.hold(kyma("europe"), template("2.0.0", downtime=False), INSTALLED) is None


def test_a_window_ending_within_the_minimum_size_is_not_used() -> None:
    mw = windows()
    mw.now = lambda: at("2026-11-25T07:50:00+00:00")  # asia's window ends in 10 min (< 20 min)
    hold = mw.hold(kyma("asia"), template("2.0.0"), INSTALLED)
    assert isinstance(hold, Unknown)  # nothing later for asia, default empty
    assert hold.message.startswith(UNKNOWN_MESSAGE)


def test_no_policy_means_the_upgrade_cannot_be_placed(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    mw = MaintenanceWindows.load(tmp_path / "policy.json", registry=registry, now=lambda: NOW)
    assert registry.get_sample_value(METRIC_CONFIG_READ_SUCCESS) == 0
    hold = mw.hold(kyma("europe"), template("2.0.0"), INSTALLED)
    assert isinstance(hold, Unknown)
    assert "no maintenance window policy configured" in hold.message and "not found" in hold.message


def test_config_read_success_metric(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text('{"default": {"days": ["Wed", "Fri"], "begin": "13:00:00Z", "end": "17:00:00Z"}}')
    bad.write_text('{"default": {"days": ["Someday"]}}')
    ok = CollectorRegistry()
    assert MaintenanceWindows.load(good, registry=ok).policy is not None
    assert ok.get_sample_value(METRIC_CONFIG_READ_SUCCESS) == 1
    failed = CollectorRegistry()
    loaded = MaintenanceWindows.load(bad, registry=failed)
    assert loaded.policy is None and "Someday" in loaded.problem
    assert failed.get_sample_value(METRIC_CONFIG_READ_SUCCESS) == 0
