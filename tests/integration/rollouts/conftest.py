"""The operator for the rollout tests: Kyma controller (module half) and the leader's rollout
controllers in this process, Manifest controller off (``fleet.Runtimes`` plays it), every safety
net an hour away, so each reaction a test waits for comes from an event or the run's own timer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kyma_operator.runtime.kube import KubeClient
from tests.integration.kyma_operator.harness import RunningOperator, operator_config, running_operator
from tests.integration.rollouts.fleet import HOUR, ShiftedWallClock


def rollout_config(namespace: str, **overrides: object) -> dict[str, object]:
    values: dict[str, object] = {
        "kyma_modules": True,
        "manifest_controller_enabled": False,
        "watcher_enabled": False,
        "kyma_healthy_interval": HOUR,
        "kyma_unhealthy_interval": HOUR,
        "module_upgrade_rollout_max_delay": 1.0,
    }
    values.update(overrides)
    return values


@pytest.fixture
def wall_clock() -> ShiftedWallClock:
    """The operator's wall clock: a test moves it past a soak instead of waiting."""
    return ShiftedWallClock()


@pytest.fixture
async def operator(
    kcp_client: KubeClient, kcp_namespace: str, wall_clock: ShiftedWallClock
) -> AsyncIterator[RunningOperator]:
    async with running_operator(
        kcp_client, operator_config(kcp_namespace, **rollout_config(kcp_namespace)), wall_clock=wall_clock
    ) as running:
        yield running
