"""Builders shared by the rollout unit tests: a policy like the gated sample, a run of it in any
phase, and Kyma names that the wave function places in a given wave."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.modulerollout import ModuleRollout, ModuleRolloutPolicySpec
from kyma_operator.rollouts.waves import placement

T0 = datetime.datetime(2026, 11, 25, 7, 0, tzinfo=datetime.UTC)
CANARY = {names.ROLLOUT_RING_LABEL: "canary"}


def policy(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "modules": [{"name": "serverless", "channels": ["regular"]}],
        "waves": [
            {
                "name": "canary",
                "selector": {"matchLabels": dict(CANARY)},
                "progressDeadline": "10m",
                "soakTime": "15m",
            },
            {
                "name": "early",
                "upToPercent": 10,
                "progressDeadline": "10m",
                "soakTime": "10m",
                "maxFailures": "1%",
            },
            {
                "name": "half",
                "upToPercent": 50,
                "progressDeadline": "15m",
                "soakTime": "5m",
                "maxFailures": 1,
            },
            {"name": "rest", "upToPercent": 100, "progressDeadline": "15m", "maxFailures": "2%"},
        ],
    }
    spec.update(changes)
    ModuleRolloutPolicySpec.model_validate(spec)
    return spec


def run(
    status: dict[str, Any] | None = None, spec: dict[str, Any] | None = None, **policy_changes: Any
) -> ModuleRollout:
    return ModuleRollout.from_object(
        {
            "metadata": {"name": "serverless-regular-1.5.0", "namespace": "kcp-system", "generation": 1},
            "spec": {
                "module": "serverless",
                "channel": "regular",
                "fromVersion": "1.4.0",
                "toVersion": "1.5.0",
                "policyRef": "gated",
                "policy": policy(**policy_changes),
                **(spec or {}),
            },
            "status": status or {},
        }
    )


def kymas_in_wave(
    rollout: ModuleRollout, wave: int, count: int, labels: dict[str, str] | None = None
) -> list[str]:
    """The first ``count`` names ``kyma-<n>`` (with ``labels``) the run places in ``wave``."""
    found: list[str] = []
    for n in itertools.count():
        name = f"kyma-{n:05d}"
        if placement(rollout, labels or {}, name).wave == wave:
            found.append(name)
            if len(found) == count:
                return found
    raise AssertionError("unreachable")
