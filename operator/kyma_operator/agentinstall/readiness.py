"""Is the runtime's agent running? The answer the Kyma controller turns into its ``SKRWebhook`` condition.

Upstream (``AssertDeploymentReady``, fixed after issues #2522/#2396 where a Kyma showed Ready while
the agent was in ImagePullBackOff): the agent is ready when its Deployment has a ready replica; with
no ready replica, a pod waiting in ``CrashLoopBackOff`` or ``ImagePullBackOff`` is an *error* (the
Kyma goes to Error), anything else is just "not ready yet". Pure functions over the Deployment and
its pods, so every branch is unit-tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

BACKOFF_REASONS = ("CrashLoopBackOff", "ImagePullBackOff")

REASON_READY = "Ready"
REASON_NOT_READY = "DeploymentNotReady"
REASON_MISSING = "DeploymentMissing"
REASON_INVALID_RUNTIME = "InvalidRuntime"
REASON_INSTALL_FAILED = "InstallationFailed"


@dataclass(frozen=True)
class AgentStatus:
    """Outcome of one ``AgentInstaller.ensure``: readiness plus what was done.

    ``error`` means the Kyma itself must go to ``Error`` (back-off, invalid runtime data); a merely
    not-yet-ready agent is ``ready=False, error=False``.
    """

    ready: bool
    error: bool
    reason: str
    message: str
    applied: tuple[str, ...] = field(default=())
    """``Kind/name`` of the objects written to the runtime by this call (empty in a steady state)."""
    requeue_after: float | None = None
    """Seconds until certificate/key rotation needs this runtime again (or readiness polling)."""

    @property
    def condition_status(self) -> str:
        return "True" if self.ready else "False"


def _waiting_reasons(pod: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                yield str(container.get("name") or "?"), str(waiting["reason"])


def assess(deployment: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]]) -> AgentStatus:
    """Readiness of the agent Deployment; ``pods`` are only consulted when no replica is ready."""
    if deployment is None:
        return AgentStatus(False, False, REASON_MISSING, "the skr-webhook Deployment does not exist (yet)")
    status = deployment.get("status") or {}
    ready_replicas = int(status.get("readyReplicas") or 0)
    if ready_replicas > 0:
        return AgentStatus(True, False, REASON_READY, "skrwebhook is synchronized")
    for pod in pods:
        name = str((pod.get("metadata") or {}).get("name") or "?")
        for container, reason in _waiting_reasons(pod):
            if reason in BACKOFF_REASONS:
                return AgentStatus(
                    False, True, reason, f"skr-webhook pod {name} container {container} is in {reason}"
                )
    return AgentStatus(
        False,
        False,
        REASON_NOT_READY,
        "skrwebhook is out of sync and needs to be resynchronized (no ready replica)",
    )
