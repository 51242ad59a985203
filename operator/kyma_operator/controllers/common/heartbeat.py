"""The runtimes' agent liveness as both controllers read it: one view, one silence limit.

The listener records each runtime's last heartbeat (``kcp_listener.health.HeartbeatTracker``). The
Kyma controller turns it into condition ``SKRWatcherHeartbeat`` and both controllers pick their
safety-net interval from it (long while the agent reports drift as events, upstream's 5 minutes
otherwise). ``AgentHealth`` pairs the tracker with the operator's one ``--heartbeat-max-silence``,
so the limit is configured once and not copied into each controller's config. Without a listener
the controllers get ``NO_AGENT_HEALTH``: every runtime counts as unhealthy and no heartbeat
condition is written (a null object instead of ``None`` checks in the reconcilers).
"""

from __future__ import annotations

from typing import Protocol

from kyma_wire.events import DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS


class HeartbeatSource(Protocol):
    """What the controllers read (``kcp_listener.health.HeartbeatTracker`` implements it)."""

    def is_healthy(self, runtime_id: str, max_silence: float | None = None) -> bool: ...

    def last_seen(self, runtime_id: str) -> float | None: ...


class AgentHealth:
    """A runtime's agent is healthy while its heartbeats are at most ``max_silence`` apart."""

    tracked = True
    """Heartbeats are tracked (a listener runs): the Kyma shows condition ``SKRWatcherHeartbeat``."""

    def __init__(
        self, source: HeartbeatSource, max_silence: float = DEFAULT_HEARTBEAT_MAX_SILENCE_SECONDS
    ) -> None:
        self.source = source
        self.max_silence = max_silence

    def healthy(self, runtime_id: str) -> bool:
        return bool(runtime_id) and self.source.is_healthy(runtime_id, self.max_silence)

    def ever_seen(self, runtime_id: str) -> bool:
        return bool(runtime_id) and self.source.last_seen(runtime_id) is not None


class _NoHeartbeats:
    def is_healthy(self, runtime_id: str, max_silence: float | None = None) -> bool:
        return False

    def last_seen(self, runtime_id: str) -> float | None:
        return None


class _NoAgentHealth(AgentHealth):
    tracked = False

    def __init__(self) -> None:
        super().__init__(_NoHeartbeats())


NO_AGENT_HEALTH: AgentHealth = _NoAgentHealth()
"""No listener, no heartbeats: every agent counts as unhealthy, no heartbeat condition."""
