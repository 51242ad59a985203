"""The starter's decisions (docs/rollouts.md §4, §12): which channel change starts a run, from which
version, under which policy, and the run it creates."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.rollouts.starter import (
    channel_changes,
    channel_versions,
    installed_below,
    matching_policy,
    most_common_oldest,
    newer,
    newest_run,
    run_body,
)


def mrm(channels: dict[str, str] | None = None, mandatory: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"moduleName": "serverless"}
    if channels is not None:
        spec["channels"] = [{"channel": c, "version": v} for c, v in channels.items()]
    if mandatory is not None:
        spec["mandatory"] = {"version": mandatory}
    return {"metadata": {"name": "serverless", "namespace": "kcp-system"}, "spec": spec}


def policy(name: str, priority: int = 0, modules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "kcp-system"},
        "spec": {
            "modules": modules or [{"name": "serverless", "channels": ["regular"]}],
            "priority": priority,
            "waves": [{"name": "all", "upToPercent": 100}],
        },
    }


def run(to: str, created: str = "2026-11-25T07:00:00Z", channel: str = "regular") -> dict[str, Any]:
    return {
        "metadata": {"name": f"serverless-{channel}-{to}", "creationTimestamp": created},
        "spec": {"module": "serverless", "channel": channel, "toVersion": to},
    }


def manifest(version: str, channel: str | None = "regular", module: str = "serverless") -> dict[str, Any]:
    labels = {names.MODULE_NAME_LABEL: module}
    if channel is None:
        labels[names.MANDATORY_MODULE_LABEL] = "true"
    else:
        labels[names.CHANNEL_LABEL] = channel
    return {"metadata": {"labels": labels}, "spec": {"version": version}}


def test_newer_compares_major_minor_patch_and_refuses_garbage() -> None:
    assert newer("1.10.0", "1.9.9") and newer("v2.0.0", "1.99.99")
    assert not newer("1.4.0", "1.4.0") and not newer("1.3.9", "1.4.0")
    assert not newer("latest", "1.0.0") and not newer("1.0.0", "latest")


def test_channel_versions_include_the_mandatory_pseudo_channel() -> None:
    assert channel_versions(mrm({"regular": "1.4.0", "fast": "1.5.0"})) == {
        "regular": "1.4.0",
        "fast": "1.5.0",
    }
    assert channel_versions(mrm(mandatory="2.0.0")) == {"mandatory": "2.0.0"}


def test_only_channels_present_before_and_after_count_as_changes() -> None:
    before = mrm({"regular": "1.4.0", "fast": "1.5.0"})
    after = mrm({"regular": "1.5.0", "fast": "1.5.0", "new": "1.0.0"})
    assert channel_changes(before, after) == {"regular": "1.4.0"}
    assert channel_changes(after, mrm({"regular": "1.5.0"})) == {}
    assert channel_changes(mrm(mandatory="1.0.0"), mrm(mandatory="1.1.0")) == {"mandatory": "1.0.0"}


def test_the_highest_priority_policy_wins_then_name_order() -> None:
    low, high, other = policy("b-low", 1), policy("z-high", 5), policy("a-other", 5)
    assert matching_policy([low, high, other], "serverless", "regular") is other
    assert matching_policy([low], "serverless", "fast") is None
    assert matching_policy([low], "eventing", "regular") is None
    wildcard = policy("any", modules=[{"name": "*", "channels": ["mandatory"]}])
    assert matching_policy([wildcard], "eventing", "mandatory") is wildcard
    deleting = policy("gone", 9)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-25T07:00:00Z"
    assert matching_policy([deleting, low], "serverless", "regular") is low


def test_newest_run_is_by_version_then_creation() -> None:
    a, b = run("1.5.0"), run("1.10.0")
    again = run("1.10.0", created="2026-11-25T08:00:00Z")
    assert newest_run([a, b]) is b
    assert newest_run([b, again, a]) is again
    assert newest_run([]) is None


def test_installed_below_counts_the_channels_manifests_under_the_version() -> None:
    found = [
        manifest("1.4.0"),
        manifest("1.4.0"),
        manifest("1.5.0"),
        manifest("1.3.0", "fast"),
        manifest("1.6.0"),
    ]
    assert installed_below(found, "serverless", "regular", "1.6.0") == {"1.4.0": 2, "1.5.0": 1}
    assert installed_below(found, "serverless", "regular", "1.4.0") == {}
    assert installed_below(found, "serverless", "mandatory", "9.0.0") == {}
    assert installed_below([manifest("2.0.0", None)], "serverless", "mandatory", "2.1.0") == {"2.0.0": 1}
    assert installed_below(found, "eventing", "regular", "9.0.0") == {}


def test_the_run_starts_from_the_most_common_installed_version_oldest_on_a_tie() -> None:
    assert most_common_oldest(Counter({"1.4.0": 2, "1.5.0": 1})) == "1.4.0"
    assert most_common_oldest(Counter({"1.5.0": 1, "1.10.0": 1, "1.4.1": 1})) == "1.4.1"


def test_the_run_body_freezes_the_policy_and_parses_as_a_run() -> None:
    source = policy("gated", 3)
    body = run_body("kcp-system", "serverless", "regular", "1.4.0", "1.5.0", source)
    assert body["metadata"]["name"] == "serverless-regular-1.5.0"
    assert body["metadata"]["labels"] == {
        names.MODULE_NAME_LABEL: "serverless",
        names.CHANNEL_LABEL: "regular",
    }
    parsed = ModuleRollout.from_object(body)
    assert (parsed.spec.from_version, parsed.spec.to_version, parsed.spec.policy_ref) == (
        "1.4.0",
        "1.5.0",
        "gated",
    )
    assert parsed.spec.policy.priority == 3
    source["spec"]["priority"] = 7  # editing the policy later does not change the run
    assert body["spec"]["policy"]["priority"] == 3
