"""The version one Kyma gets for one module while a rollout runs (docs/rollouts.md §6.4, §8.2, §8.5).

Why pure and separate: the Kyma reconcile on every shard holder asks it for each module, the CLI
asks it to explain why a Kyma is held, and the answer must be the same everywhere and after any
restart. It depends only on the run (spec + status), the Kyma's labels and name, the version the
channel names now, the version installed, and whether the user just switched the module's channel.
``resolve()`` calls it where it reads the channel's version; without a run it is never consulted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from kyma_operator.api.modulerollout import (
    ACTIVE_PHASES,
    IGNORED_PHASES,
    REVERT_PHASES,
    ModuleRollout,
    RevertScope,
)
from kyma_operator.rollouts.selection import version_key
from kyma_operator.rollouts.waves import Placement, placement


@dataclass(frozen=True, slots=True)
class Governed:
    """A policy selects the module and channel: a channel move is (or is about to be) a rollout.

    Returned by a lookup that knows the policies (``lookup.RunIndex`` with a policy listing): it
    closes the gap between an MRM update and its run's creation by the leader, in which the Kymas
    the same update wakes would otherwise upgrade ungated (docs/rollouts.md §6.4)."""

    policy: str
    hold_channel_switches: bool = False
    run: ModuleRollout | None = None
    """The run in force, if any (it may be for an older version of the channel)."""


RolloutLookup = Callable[[str, str], ModuleRollout | Governed | None]
"""``(module, channel) -> the run in force for them, or what governs them, or None`` (channel
``mandatory`` for a mandatory module). Injected into module resolution; without one resolution is
today's."""


class Reason(StrEnum):
    CHANNEL = "channel"
    """No run applies: the channel's version (today's resolution)."""
    SWITCH = "switch"
    """The user switched the module's channel and the policy does not hold switches (§8.2)."""
    RELEASED = "released"
    """The frontier covers the Kyma: the run's ``toVersion``."""
    HELD = "held"
    """Not released (or the run halted/aborted): the installed version, ``fromVersion`` if none."""
    AWAITING_RUN = "awaiting-run"
    """A policy governs the channel, which moved, but its run does not exist yet: installed version."""
    REVERT = "revert"
    """In the revert scope at ``toVersion``: back to ``fromVersion`` (the recorded downgrade, §8.5)."""


@dataclass(frozen=True, slots=True)
class Target:
    version: str
    reason: Reason
    rollout: str | None = None
    """The run's name when ``version`` is its ``toVersion`` (the Manifest's ``rollout`` label)."""

    @property
    def reverted_by(self) -> str | None:
        """The run whose revert this is (the Manifest's ``reverted-by`` annotation)."""
        return self.rollout if self.reason is Reason.REVERT else None

    @property
    def allows_downgrade(self) -> bool:
        """Only a rollout's revert may go below the installed version."""
        return self.reason is Reason.REVERT


def in_revert_scope(run: ModuleRollout, where: Placement) -> bool:
    """Whether a Kyma placed at ``where`` is taken back by the run's recorded revert."""
    revert = run.status.revert
    if revert is None or not where.released(run.status.frontier):
        return False
    return revert.scope is RevertScope.ALL_UPGRADED or where.wave == revert.wave


def target(
    run: ModuleRollout | Governed | None,
    channel_version: str,
    labels: Mapping[str, str],
    name: str,
    installed: str | None,
    *,
    switching: bool = False,
) -> Target:
    """The version a Kyma (``labels``, ``name``) gets while the channel names ``channel_version``.

    ``run``: what the lookup found (a run, a governing policy with its run if any, or nothing);
    ``installed``: the module's installed version (its Manifest's ``spec.version``; None: not
    installed); ``switching``: the user changed the module's channel since it was installed.
    """
    governed = run if isinstance(run, Governed) else None
    if governed is not None:
        run = governed.run
    assert not isinstance(run, Governed)
    if run is None or channel_version != run.spec.to_version:
        if governed is not None and _awaits_run(governed, channel_version, installed, switching):
            assert installed is not None
            return Target(installed, Reason.AWAITING_RUN)
        # no run (none governs), or the channel moved elsewhere since the run started
        return Target(channel_version, Reason.CHANNEL)
    if run.status.phase in IGNORED_PHASES:  # finished: today's resolution
        return Target(channel_version, Reason.CHANNEL)
    spec = run.spec
    if switching and not spec.policy.hold_channel_switches:
        return Target(channel_version, Reason.SWITCH, run.name)
    where = placement(run, labels, name)
    phase = run.status.phase
    if phase in REVERT_PHASES and installed == spec.to_version and in_revert_scope(run, where):
        return Target(spec.from_version, Reason.REVERT, run.name)
    if phase in ACTIVE_PHASES and where.released(run.status.frontier):
        return Target(spec.to_version, Reason.RELEASED, run.name)
    kept = installed or spec.from_version
    return Target(kept, Reason.HELD, run.name if kept == spec.to_version else None)


def _awaits_run(governed: Governed, channel_version: str, installed: str | None, switching: bool) -> bool:
    """The channel moved up from the installed version and the leader has not started its run yet:
    keep the installed version. Not for a first install, a channel that moved down (the
    no-downgrade rule speaks) or a user's switch the policy does not hold (§8.2)."""
    if installed is None or (switching and not governed.hold_channel_switches):
        return False
    return version_key(channel_version) > version_key(installed)
