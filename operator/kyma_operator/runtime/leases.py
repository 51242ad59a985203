"""What the leader election and the shard coordinator share about ``coordination.k8s.io/v1`` Leases.

Why a module of its own: both decide "may I act?" from Leases the same way, and the rules must not
drift apart. A Lease's spec is written in ``MicroTime`` format; whether another process's Lease has
expired is judged on **this** process's monotonic clock (the time since its spec last changed, as
this process observed it), never by comparing the Lease's wall-clock ``renewTime`` with our own
clock, so clock skew between machines cannot make two processes act at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]


def micro_time(moment: datetime) -> str:
    """A Lease ``MicroTime`` (``2026-11-24T06:00:00.123456Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(holder: str, duration: float, acquire_time: str, renew_time: str, transitions: int) -> JSON:
    """The spec a holder writes (duration rounded up to whole seconds, at least 1)."""
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": max(1, math.ceil(duration)),
        "acquireTime": acquire_time,
        "renewTime": renew_time,
        "leaseTransitions": transitions,
    }


@dataclass(slots=True)
class Observed:
    """A Lease as this process last saw it, and when (monotonic) its spec last changed."""

    spec: JSON
    resource_version: str
    changed_at: float

    @property
    def holder(self) -> str:
        return str(self.spec.get("holderIdentity") or "")

    def duration(self, default: float) -> float:
        return float(self.spec.get("leaseDurationSeconds") or default)

    def expired(self, now: float, default_duration: float) -> bool:
        """Nobody holds it, or its spec has not changed for its duration (on our clock)."""
        return not self.holder or self.changed_at + self.duration(default_duration) <= now


class LeaseObservations:
    """Remembers, per Lease name, when its spec last changed as seen by this process."""

    def __init__(self) -> None:
        self._seen: dict[str, Observed] = {}

    def observe(self, lease: JSON, now: float) -> Observed:
        meta = lease.get("metadata") or {}
        name = str(meta.get("name") or "")
        spec = lease.get("spec") or {}
        rv = str(meta.get("resourceVersion") or "")
        seen = self._seen.get(name)
        if seen is None or seen.spec != spec:
            seen = Observed(spec, rv, now)
            self._seen[name] = seen
        else:
            seen.resource_version = rv
        return seen

    def get(self, name: str) -> Observed | None:
        return self._seen.get(name)

    def forget_missing(self, present: set[str]) -> None:
        """Drop Leases that no longer exist (deleted membership Leases)."""
        for name in [n for n in self._seen if n not in present]:
            del self._seen[name]
