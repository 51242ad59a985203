"""Agent readiness from the Deployment and its pods (upstream AssertDeploymentReady semantics)."""

from __future__ import annotations

from typing import Any

import pytest

from kyma_operator.agentinstall.readiness import assess


def _pod(name: str, reason: str | None, *, init: bool = False) -> dict[str, Any]:
    state = {"waiting": {"reason": reason}} if reason else {"running": {}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": name}, "status": {key: [{"name": "server", "state": state}]}}


def test_missing_deployment_is_not_ready_but_no_error() -> None:
    status = assess(None, [])
    assert (status.ready, status.error, status.reason) == (False, False, "DeploymentMissing")


def test_ready_replica_wins_over_crashing_pods() -> None:
    status = assess({"status": {"readyReplicas": 1}}, [_pod("p", "CrashLoopBackOff")])
    assert status.ready and not status.error and status.condition_status == "True"
    assert status.message == "skrwebhook is synchronized"


@pytest.mark.parametrize("reason", ["CrashLoopBackOff", "ImagePullBackOff"])
@pytest.mark.parametrize("init", [False, True])
def test_backoff_without_ready_replica_is_an_error(reason: str, init: bool) -> None:
    status = assess({"status": {"readyReplicas": 0}}, [_pod("ok", None), _pod("bad", reason, init=init)])
    assert (status.ready, status.error, status.reason) == (False, True, reason)
    assert "bad" in status.message and reason in status.message


def test_other_waiting_reasons_are_just_not_ready() -> None:
    status = assess({"status": {}}, [_pod("p", "ContainerCreating"), _pod("q", "ErrImagePull")])
    assert (status.ready, status.error, status.reason) == (False, False, "DeploymentNotReady")
    assert status.condition_status == "False"
