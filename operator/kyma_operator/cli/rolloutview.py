"""What ``kyma module rollout`` shows and how it exits: rows, the halt line, watch lines, exit codes.

Why: the output and the exit code are the CLI's contract with people and scripts (docs/rollouts.md
§11: ``0`` progressing/paused/awaiting approval/completed/aborted, ``1`` halted/reverting/reverted
with one line naming the wave and the reason, the worst of several runs wins). Keeping it pure
(models in, rows and strings out, ``now`` injected) lets the unit tests pin every case, and lets the
table, ``--watch`` and ``-o json|yaml`` render the same facts.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from kyma_operator.api.modulerollout import (
    REVERT_PHASES,
    TERMINAL_PHASES,
    ModuleRollout,
    Phase,
    RolloutState,
)

EXIT_OK = 0
EXIT_HALTED = 1
EXIT_USAGE = 2
"""Typer's own code for a usage error; also "no such run"."""
EXIT_API = 3
"""The API server is unreachable or denies access."""

FAILING_PHASES = frozenset({Phase.HALTED, *REVERT_PHASES})
"""Phases that exit 1 with the halt line."""
WATCH_END_PHASES = frozenset({*TERMINAL_PHASES, Phase.HALTED})
"""``--watch`` returns once every watched run is in one of these (Halted needs a person)."""

RUN_COLUMNS = [
    ("rollout", "ROLLOUT"),
    ("phase", "PHASE"),
    ("wave", "WAVE"),
    ("upgraded", "UPGRADED"),
    ("ready", "READY"),
    ("failed", "FAILED"),
    ("waiting", "WAITING"),
    ("held", "HELD"),
    ("age", "AGE"),
]
WAVE_COLUMNS = [
    ("wave", "WAVE"),
    ("members", "MEMBERS"),
    ("released", "RELEASED"),
    ("upgraded", "UPGRADED"),
    ("ready", "READY"),
    ("failed", "FAILED"),
    ("waiting", "WAITING"),
    ("pending", "PENDING"),
]


def wave_name(run: ModuleRollout, index: int) -> str:
    waves = run.spec.policy.waves
    return waves[index].name if 0 <= index < len(waves) else f"#{index}"


def current_wave(run: ModuleRollout) -> int:
    """The wave a run is in, or failed in (a revert is about the wave it recorded)."""
    if run.status.phase in REVERT_PHASES and run.status.revert is not None:
        return run.status.revert.wave
    return min(run.status.frontier.wave, len(run.spec.policy.waves) - 1)


def age(created: datetime.datetime | None, now: datetime.datetime) -> str:
    """kubectl's short age: 45s, 12m, 5h, 3d."""
    if created is None:
        return "-"
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def phase_text(run: ModuleRollout) -> str:
    """The phase, with the operator's intent when the leader has not acted on it yet."""
    phase = run.status.phase
    wanted = run.spec.state
    if wanted is RolloutState.PAUSED and phase not in (Phase.PAUSED, *WATCH_END_PHASES):
        return f"{phase.value} (pausing)"
    if wanted is RolloutState.ABORTED and phase is not Phase.ABORTED:
        return f"{phase.value} (aborting)"
    if wanted is RolloutState.RUNNING and phase is Phase.PAUSED:
        return f"{phase.value} (resuming)"
    return phase.value


def run_row(run: ModuleRollout, now: datetime.datetime) -> dict[str, Any]:
    totals = run.status.totals
    return {
        "rollout": run.name,
        "phase": phase_text(run),
        "wave": wave_name(run, current_wave(run)),
        "upgraded": f"{totals.upgraded}/{totals.members}",
        "ready": totals.ready,
        "failed": totals.failed,
        "waiting": totals.waiting,
        "held": totals.held,
        "age": age(run.metadata.creation_timestamp, now),
    }


def released_text(run: ModuleRollout, index: int) -> str:
    frontier = run.status.frontier
    if run.status.phase is Phase.COMPLETED or index < frontier.wave:
        return "yes"
    if index > frontier.wave or frontier.threshold <= 0:
        return "no"
    return "yes" if frontier.threshold >= 1 else f"{frontier.threshold:.0%} of the wave"


def wave_rows(run: ModuleRollout) -> list[dict[str, Any]]:
    counts = {wave.name: wave for wave in run.status.waves}
    rows = []
    for index, wave in enumerate(run.spec.policy.waves):
        seen = counts.get(wave.name)
        rows.append(
            {
                "wave": wave.name,
                "members": seen.members if seen else "-",
                "released": released_text(run, index),
                "upgraded": seen.upgraded if seen else 0,
                "ready": seen.ready if seen else 0,
                "failed": seen.failed if seen else 0,
                "waiting": seen.waiting if seen else 0,
                "pending": seen.pending if seen else 0,
            }
        )
    return rows


def one_line(text: str) -> str:
    return " ".join(text.split())


def halt_line(run: ModuleRollout) -> str:
    """``rollout serverless-regular-1.5.0 halted in wave canary: 2 failed > maxFailures 0 (...)``."""
    wave = wave_name(run, current_wave(run))
    reason = one_line(run.status.halt_reason or run.status.message or "no reason recorded")
    prefix = f"wave {wave}: "
    if reason.startswith(prefix):
        reason = reason[len(prefix) :]
    return f"rollout {run.name} {run.status.phase.value.lower()} in wave {wave}: {reason}"


def exit_code(runs: Iterable[ModuleRollout]) -> int:
    """The worst of the runs: 1 if any is halted, reverting or reverted, else 0."""
    return EXIT_HALTED if any(run.status.phase in FAILING_PHASES for run in runs) else EXIT_OK


def failing_lines(runs: Iterable[ModuleRollout]) -> list[str]:
    return [halt_line(run) for run in runs if run.status.phase in FAILING_PHASES]


def resume_hint(run: ModuleRollout, namespace: str) -> str:
    failed = run.status.totals.failed or len(run.status.failed_kymas)
    where = f"--rollout {run.name} -n {namespace}"
    return (
        f"hint: `kyma module rollout resume {where} --ignore-failed` exempts the {failed} failed "
        f"Kyma(s) from the failure budget and resumes; `kyma module rollout abort {where}` stops "
        "the rollout for good"
    )


def watch_line(run: ModuleRollout, now: datetime.datetime) -> str:
    """One line per change when stdout is not a terminal."""
    row = run_row(run, now)
    waves = len(run.spec.policy.waves)
    return (
        f"{now.strftime('%H:%M:%S')} rollout {run.name} {row['phase']} wave {row['wave']} "
        f"({current_wave(run) + 1}/{waves}) upgraded {row['upgraded']} ready {row['ready']} "
        f"failed {row['failed']} waiting {row['waiting']} held {row['held']}"
    )


def watch_done(runs: Sequence[ModuleRollout]) -> bool:
    return bool(runs) and all(run.status.phase in WATCH_END_PHASES for run in runs)


def document(obj: dict[str, Any]) -> dict[str, Any]:
    """``-o json|yaml``: a run as the API server holds it, reduced to name, spec and status."""
    meta = obj.get("metadata") or {}
    return {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "spec": obj.get("spec") or {},
        "status": obj.get("status") or {},
    }
