"""``kyma module rollout status --kyma K``: one Kyma's wave in a rollout, released or not, and why.

Why: the operator writes nothing per Kyma to move a rollout (docs/rollouts.md §6: a Kyma's wave is a
pure function of the run's frozen policy and the Kyma's labels), so "why does kyma-0042 still have
1.4.0?" is answered here, client-side, with the same functions the operator uses
(``rollouts.waves``, ``rollouts.target``) applied to the run and the Kyma as the API server holds them.
"""

from __future__ import annotations

from typing import Any

from kyma_operator.api.modulerollout import (
    IGNORED_PHASES,
    REVERT_PHASES,
    ModuleRollout,
    Phase,
    RolloutState,
)
from kyma_operator.cli import rolloutview as view
from kyma_operator.rollouts.target import in_revert_scope, target
from kyma_operator.rollouts.waves import Placement, placement_of_object

KYMA_COLUMNS = [
    ("rollout", "ROLLOUT"),
    ("kyma", "KYMA"),
    ("wave", "WAVE"),
    ("released", "RELEASED"),
    ("installed", "INSTALLED"),
    ("gets", "GETS"),
    ("reason", "REASON"),
]


def installed_version(run: ModuleRollout, kyma: dict[str, Any]) -> str | None:
    """The module's version the Kyma reports (``status.modules[]``), if it has the module."""
    for entry in (kyma.get("status") or {}).get("modules") or []:
        if entry.get("name") == run.spec.module:
            version = entry.get("version")
            return str(version) if version else None
    return None


def reason(run: ModuleRollout, place: Placement, installed: str | None) -> str:
    """Why the Kyma has (or will get) the version it has, in the terms of docs/rollouts.md §6.4."""
    phase, spec = run.status.phase, run.spec
    waves = len(spec.policy.waves)
    wave = f"wave {view.wave_name(run, place.wave)} ({place.wave + 1}/{waves})"
    keeps = f"keeps {installed}" if installed else f"a new install gets {spec.from_version}"
    if phase in IGNORED_PHASES:
        return f"not held: the rollout is {phase.value}, the channel's version applies"
    if phase in REVERT_PHASES and in_revert_scope(run, place):
        return f"in the revert scope: goes back to {spec.from_version} (recorded on the run)"
    if place.released(run.status.frontier):
        if phase in (Phase.HALTED, Phase.ABORTED) or phase in REVERT_PHASES:
            return f"released in {wave} before the rollout stopped ({phase.value}): keeps what it has"
        return f"released in {wave}: upgrades to {spec.to_version}"
    frontier = run.status.frontier
    if phase is Phase.HALTED:
        stopped = f"the rollout halted in wave {view.wave_name(run, view.current_wave(run))}"
    elif phase is Phase.ABORTED or spec.state is RolloutState.ABORTED:
        stopped = "the rollout was aborted"
    elif phase in REVERT_PHASES:
        stopped = f"the rollout is {phase.value.lower()}"
    elif spec.state is RolloutState.PAUSED or phase is Phase.PAUSED:
        stopped = f"{wave} not released, the rollout is paused"
    elif phase is Phase.AWAITING_APPROVAL and place.wave == frontier.wave:
        stopped = f"{wave} awaits manual approval (`kyma module rollout resume`)"
    elif place.wave == frontier.wave:
        stopped = f"{wave} is released in steps (maxConcurrency), {frontier.threshold:.0%} of it so far"
    else:
        stopped = f"{wave} not released yet (the rollout is in wave {view.wave_name(run, frontier.wave)})"
    return f"held: {stopped}; {keeps}"


def kyma_row(run: ModuleRollout, kyma: dict[str, Any]) -> dict[str, Any]:
    place = placement_of_object(run, kyma)
    installed = installed_version(run, kyma)
    meta = kyma.get("metadata") or {}
    # the operator's own answer (rollouts.target), assuming the channel still names toVersion
    gets = target(run, run.spec.to_version, meta.get("labels") or {}, str(meta.get("name") or ""), installed)
    return {
        "rollout": run.name,
        "kyma": meta.get("name"),
        "wave": view.wave_name(run, place.wave),
        "released": "yes" if place.released(run.status.frontier) else "no",
        "installed": installed,
        "gets": gets.version,
        "reason": reason(run, place, installed),
    }


def kyma_line(run: ModuleRollout, kyma: dict[str, Any]) -> str:
    row = kyma_row(run, kyma)
    return (
        f"rollout {row['rollout']} {run.status.phase.value} kyma {row['kyma']} wave {row['wave']} "
        f"released {row['released']}: {row['reason']}"
    )
