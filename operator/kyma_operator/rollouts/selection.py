"""Which policy governs a version change, and which run is in force for a module and channel.

Why one place: the starter picks a policy when a channel moves, and every Kyma reconcile's
``RolloutLookup`` picks the run to ask ``target()``; both must break ties the same way on every
replica, from nothing but the objects the informers hold (docs/rollouts.md §4, §8.4).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kyma_operator.api.modulerollout import IGNORED_PHASES, ModuleRollout, ModuleRolloutPolicy

_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def version_key(version: str) -> tuple[int, int, int]:
    """major.minor.patch of ``version`` for ordering (module resolution's rule); unparsable sorts first."""
    match = _SEMVER.match(version)
    if match is None:
        return (-1, -1, -1)
    major, minor, patch = (int(part) for part in match.groups())
    return (major, minor, patch)


def choose_policy(
    policies: Iterable[ModuleRolloutPolicy], module: str, channel: str
) -> ModuleRolloutPolicy | None:
    """The matching policy with the highest ``priority``; ties go to the first name in order."""
    matching = [p for p in policies if not p.is_deleting() and p.spec.selects(module, channel)]
    if not matching:
        return None
    return min(matching, key=lambda p: (-p.spec.priority, p.name))


def run_in_force(runs: Iterable[ModuleRollout], module: str, channel: str) -> ModuleRollout | None:
    """The run for ``module`` on ``channel`` that still holds Kymas back: not Completed, Invalid or
    Superseded, and of those the one to the newest ``toVersion`` (a run the starter has not yet
    marked Superseded loses to its successor)."""
    candidates = [
        r
        for r in runs
        if r.spec.module == module and r.spec.channel == channel and r.status.phase not in IGNORED_PHASES
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (version_key(r.spec.to_version), r.name))
