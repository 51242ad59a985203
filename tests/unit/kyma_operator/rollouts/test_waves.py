"""Wave assignment (docs/rollouts.md §6.1-6.3): stable across processes, independent of the fleet,
selector waves first, cumulative percentages within 3 sigma on 100,000 runtime ids, a within-wave
order independent of the wave hash and of the shard hash."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter

from kyma_operator.api import names
from kyma_operator.api.modulerollout import Frontier, ModuleRolloutPolicySpec
from kyma_operator.rollouts.waves import (
    Placement,
    place,
    placement,
    placement_of_object,
    runtime_id,
    threshold_for,
)
from kyma_operator.runtime.shardmap import shard_of
from tests.unit.kyma_operator.rollouts.runs import CANARY, policy, run

IDS = [f"runtime-{n}" for n in range(100_000)]
SPEC = ModuleRolloutPolicySpec.model_validate(policy())


def _within_3_sigma(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= 3 * math.sqrt(n * p * (1 - p))


def test_same_placement_in_another_process_with_another_hash_seed() -> None:
    sample = IDS[:200]
    here = [[p.wave, p.order] for p in (place(SPEC, "serverless", {}, i) for i in sample)]
    code = (
        "import json,sys\n"
        "from kyma_operator.api.modulerollout import ModuleRolloutPolicySpec\n"
        "from kyma_operator.rollouts.waves import place\n"
        "spec = ModuleRolloutPolicySpec.model_validate(json.loads(sys.argv[1]))\n"
        "ids = json.loads(sys.argv[2])\n"
        "print(json.dumps([[p.wave, p.order] for p in (place(spec, 'serverless', {}, i) for i in ids)]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(policy()), json.dumps(sample)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    assert json.loads(out) == here


def test_placement_does_not_depend_on_the_fleet() -> None:
    alone = {i: place(SPEC, "serverless", {}, i) for i in IDS[:1000]}
    in_fleet = {i: place(SPEC, "serverless", {}, i) for i in reversed(IDS[:5000])}
    assert all(in_fleet[i] == p for i, p in alone.items())


def test_selector_waves_come_first_and_the_first_match_wins() -> None:
    two_rings = ModuleRolloutPolicySpec.model_validate(
        policy(
            waves=[
                {"name": "canary", "selector": {"matchLabels": dict(CANARY)}},
                {"name": "eu", "selector": {"matchLabels": {names.REGION_LABEL: "eu"}}},
                {"name": "rest", "upToPercent": 100},
            ]
        )
    )
    for identity in IDS[:500]:
        assert place(two_rings, "m", {**CANARY, names.REGION_LABEL: "eu"}, identity).wave == 0
        assert place(two_rings, "m", {names.REGION_LABEL: "eu"}, identity).wave == 1
        assert place(two_rings, "m", {names.REGION_LABEL: "us"}, identity).wave == 2
        # a selector wave takes its Kymas out of the percentages whatever their hash
        assert place(SPEC, "serverless", CANARY, identity).wave == 0


def test_cumulative_percentages_hold_within_three_sigma_on_100000_ids() -> None:
    n = len(IDS)
    counts = Counter(place(SPEC, "serverless", {}, i).wave for i in IDS)
    assert counts[0] == 0, "no Kyma without the canary label is in the selector wave"
    assert _within_3_sigma(counts[1], n, 0.10), counts
    assert _within_3_sigma(counts[1] + counts[2], n, 0.50), counts
    assert counts[1] + counts[2] + counts[3] == n


def test_the_seed_reshuffles_and_the_order_hash_is_independent() -> None:
    n = 20_000
    mine = [place(SPEC, "serverless", {}, i) for i in IDS[:n]]
    other = [place(SPEC, "keda", {}, i) for i in IDS[:n]]
    both_early = sum(1 for a, b in zip(mine, other, strict=True) if a.wave == 1 and b.wave == 1)
    assert _within_3_sigma(both_early, n, 0.01), "another module's early wave is other Kymas"
    early = [p for p in mine if p.wave == 1]
    below_half = sum(1 for p in early if p.order < 0.5)
    assert _within_3_sigma(below_half, len(early), 0.5), "order is uniform inside the wave"
    shard_zero = sum(1 for i, p in zip(IDS[:n], mine, strict=True) if p.wave == 1 and shard_of(i, 16) == 0)
    assert _within_3_sigma(shard_zero, len(early), 1 / 16), "waves do not line up with shards"


def test_frontier_release_and_thresholds() -> None:
    assert Placement(0, 0.9).released(Frontier(wave=1, threshold=0.0))
    assert Placement(1, 0.2).released(Frontier(wave=1, threshold=0.3))
    assert not Placement(1, 0.3).released(Frontier(wave=1, threshold=0.3))
    assert not Placement(2, 0.0).released(Frontier(wave=1, threshold=1.0))
    orders = [0.7, 0.1, 0.4, 0.9]
    t = threshold_for(orders, 2)
    assert sorted(o < t for o in orders) == [False, False, True, True] and 0.4 < t < 0.7
    assert threshold_for(orders, 4) == 1.0 and threshold_for(orders, 0) == 0.0 and threshold_for([], 3) == 1.0


def test_runtime_id_label_first_else_name() -> None:
    assert runtime_id({names.RUNTIME_ID_LABEL: "rt-1"}, "kyma-a") == "rt-1"
    assert runtime_id({}, "kyma-a") == "kyma-a"
    rollout = run()
    labels = {names.RUNTIME_ID_LABEL: "rt-1"}
    obj = {"metadata": {"name": "kyma-a", "labels": labels}}
    assert placement_of_object(rollout, obj) == placement(rollout, labels, "other-name")
