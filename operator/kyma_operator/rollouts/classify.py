"""Which class each member Kyma of a rollout is in right now (docs/rollouts.md §7.1, §8.3).

Why apart from the gate step: the leader's step, the CLI's ``status --kyma`` and the metrics all
ask "is this Kyma held, pending, waiting, upgrading, Ready or failed, and until when?"; the answer
is a pure function of the run's status, what the informers show of the Kyma and its Manifest
(``observe``), and ``now``. No per-Kyma state: a Kyma's upgrade start is its wave's release (or
the ``maxConcurrency`` step that covered it, or the start of its maintenance window).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kyma_operator.api.meta import State
from kyma_operator.api.modulerollout import ModuleRollout, ModuleRolloutStatus, Phase
from kyma_operator.rollouts.waves import Placement, placement

_seconds = datetime.timedelta


@dataclass(frozen=True, slots=True)
class Member:
    """What the informers show of one Kyma using the run's module on its channel.

    The caller leaves out Kymas that are not reconciled (``skip-reconciliation``, being deleted):
    they could never become Ready and would fail their wave. For a Kyma whose upgrade needed a
    maintenance window the caller sets ``window_began`` (the window's begin, from the window
    policy), so its deadline counts from then and its upgrade during a soak is not a flap.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    version: str | None = None
    """The Manifest's ``spec.version`` (None: no Manifest)."""
    state: State | None = None
    """The Manifest's ``status.state`` if written for its current generation, else None."""
    message: str = ""
    """The Manifest's last operation (for the halt reason)."""
    waiting: bool = False
    """The Kyma's module entry says ``maintenance: true``: its upgrade waits for its window."""
    window_began: datetime.datetime | None = None
    """Start of the maintenance window it upgraded in (its upgrade start when later than release)."""


def observe(kyma: Mapping[str, Any], manifest: Mapping[str, Any] | None, module: str) -> Member:
    """A ``Member`` from a Kyma and its Manifest of ``module`` as the informers hold them (dicts)."""
    meta = kyma.get("metadata") or {}
    entry = next(
        (m for m in (kyma.get("status") or {}).get("modules") or [] if m.get("name") == module), None
    )
    waiting = bool(entry and entry.get("maintenance"))
    if manifest is None:
        return Member(str(meta.get("name") or ""), meta.get("labels") or {}, waiting=waiting)
    spec, status = manifest.get("spec") or {}, manifest.get("status") or {}
    generation = (manifest.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    current = observed is None or generation is None or observed >= generation
    raw_state = status.get("state")
    known = {state.value for state in State}
    state = State(raw_state) if current and isinstance(raw_state, str) and raw_state in known else None
    operation = (status.get("lastOperation") or {}).get("operation") or ""
    return Member(
        str(meta.get("name") or ""),
        meta.get("labels") or {},
        version=spec.get("version"),
        state=state,
        message=str(operation),
        waiting=waiting,
    )


class Class(StrEnum):
    """A member's class for its wave (§7.1)."""

    HELD = "held"
    SWITCHED_IN = "switchedIn"
    """Not released, yet at ``toVersion`` (a user's channel switch brought it there, §8.2)."""
    PENDING = "pending"
    WAITING = "waiting"
    UPGRADING = "upgrading"
    READY = "ready"
    FAILED = "failed"


SETTLED = frozenset({Class.READY, Class.WAITING, Class.FAILED})


@dataclass(frozen=True, slots=True)
class Classified:
    member: Member
    where: Placement
    cls: Class
    upgraded: bool = False
    """Released and its Manifest at ``toVersion``."""
    why: str = ""
    """Why it failed (for the halt reason)."""
    deadline: datetime.datetime | None = None
    """When an unsettled released member fails unless Ready (None: no deadline)."""


def _upgrade_start(status: ModuleRolloutStatus, member: Member, where: Placement) -> datetime.datetime | None:
    """The wave's release, the ``maxConcurrency`` step that covered the member, or the start of
    the maintenance window it upgraded in, whichever is latest."""
    start = status.waves[where.wave].released_at if where.wave < len(status.waves) else None
    if where.wave == status.frontier.wave:
        step = next((s.at for s in status.frontier_steps if where.order < s.threshold), None)
        start = step or start
    if start is not None and member.window_began is not None and member.window_began > start:
        start = member.window_began
    return start


def classify(
    run: ModuleRollout,
    status: ModuleRolloutStatus,
    member: Member,
    now: datetime.datetime,
    where: Placement | None = None,
) -> Classified:
    """The member's class under ``status`` (frontier, release times, phase) at ``now``
    (``where``: its placement, if the caller computed it already)."""
    to_version = run.spec.to_version
    if where is None:
        where = placement(run, member.labels, member.name)
    if not where.released(status.frontier):
        cls = Class.SWITCHED_IN if member.version == to_version else Class.HELD
        return Classified(member, where, cls)
    wave = run.spec.policy.waves[where.wave]
    start = _upgrade_start(status, member, where)
    limit = wave.deadline_seconds()
    deadline = start + _seconds(seconds=limit) if start is not None and limit is not None else None
    late = deadline is not None and now >= deadline
    if member.version != to_version:
        if member.waiting:
            return Classified(member, where, Class.WAITING)
        if late:
            why = f"not upgraded within progressDeadline {wave.progress_deadline}"
            return Classified(member, where, Class.FAILED, why=why)
        return Classified(member, where, Class.PENDING, deadline=deadline)
    if member.state is State.READY:
        return Classified(member, where, Class.READY, upgraded=True)
    if member.state is State.ERROR:
        why = f"Manifest Error: {member.message}" if member.message else "Manifest Error"
        return Classified(member, where, Class.FAILED, upgraded=True, why=why)
    soak = status.soak_started_at if status.phase is Phase.SOAKING else None
    if soak is not None and where.wave == status.frontier.wave and start is not None and start <= soak:
        why = f"left Ready during the soak ({member.state.value if member.state else 'no state'})"
        return Classified(member, where, Class.FAILED, upgraded=True, why=why)
    if late:
        why = f"not Ready within progressDeadline {wave.progress_deadline}"
        return Classified(member, where, Class.FAILED, upgraded=True, why=why)
    return Classified(member, where, Class.UPGRADING, upgraded=True, deadline=deadline)
