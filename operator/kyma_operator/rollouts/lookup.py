"""The run in force for a module and channel, read from the ModuleRollout informer (docs/rollouts.md §5).

Why: every Kyma reconcile on every replica asks, per module, which run (if any) decides its version
(``target.RolloutLookup``). The answer must cost a dict look-up, not a list of all runs and a
pydantic parse per module per reconcile: the informer indexes runs by module and channel, and a
parsed run is kept until its resourceVersion changes. The run in force is the one with the newest
``toVersion`` (a newer run supersedes older ones, §8.4); ``target()`` itself ignores it once it is
``Completed``, ``Invalid`` or ``Superseded``, or when the channel has moved past its ``toVersion``.

The gap between a channel move and its run: the leader creates the run a few milliseconds after
the release meta changed, but a Kyma reconciled in between (a Manifest event, the catalog fan-out)
would resolve the new version ungated. So every replica notes, from the same release-meta update
that wakes the Kymas, each channel move a policy selects (``starter.matching_policy``) and answers
with that run as it will be created (nothing released yet: every Kyma keeps its version) until the
real run is in the informer, for at most ``hold_for`` seconds (a run that is never created, e.g. a
policy the API server refuses, holds nobody longer than that).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.rollouts.starter import (
    channel_changes,
    channel_versions,
    matching_policy,
    module_of_release_meta,
    newer,
    newest_run,
    run_body,
)
from kyma_operator.rollouts.target import RolloutLookup
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.informer import FuncHandler, Informer

RUNS_BY_MODULE_CHANNEL = "rollout/module-channel"
"""Index of the ModuleRollout informer: ``<module>/<channel>`` of each run's spec."""


def module_channel_key(module: str, channel: str) -> str:
    return f"{module}/{channel}"


def _index(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    if not spec.get("module") or not spec.get("channel"):
        return []
    return [module_channel_key(str(spec["module"]), str(spec["channel"]))]


HOLD_FOR = 60.0
"""Seconds a channel move a policy selects holds the Kymas while its run is not yet created."""


class RunIndex:
    """``run_for(namespace, module, channel)`` over the shared ModuleRollout informer (and, with
    ``policies`` and ``release_metas``, the runs about to start; see the module docstring)."""

    def __init__(
        self,
        rollouts: Informer,
        *,
        policies: Informer | None = None,
        release_metas: Informer | None = None,
        clock: Clock | None = None,
        hold_for: float = HOLD_FOR,
    ) -> None:
        self.rollouts = rollouts
        self.policies = policies
        self.hold_for = hold_for
        self._clock = clock or RealClock()
        with contextlib.suppress(ValueError):  # already indexed (a second controller built one)
            rollouts.add_indexer(RUNS_BY_MODULE_CHANNEL, _index)
        self._parsed: dict[tuple[str, str], tuple[str, ModuleRollout | None]] = {}
        self._starting: dict[tuple[str, str, str], tuple[float, ModuleRollout]] = {}
        if policies is not None and release_metas is not None:
            release_metas.add_handler(FuncHandler(on_update=self._release_meta_updated))

    def run_for(self, namespace: str, module: str, channel: str) -> ModuleRollout | None:
        candidates = [
            obj
            for obj in self.rollouts.by_index(RUNS_BY_MODULE_CHANNEL, module_channel_key(module, channel))
            if (obj.get("metadata") or {}).get("namespace") == namespace
        ]
        newest = newest_run(candidates)
        run = self._parse(newest) if newest is not None else None
        key = (namespace, module, channel)
        starting = self._starting.get(key)
        if starting is None:
            return run
        until, upcoming = starting
        if (run is not None and not newer(upcoming.spec.to_version, run.spec.to_version)) or (
            self._clock.now() >= until
        ):
            del self._starting[key]  # created (or given up on): the informer's run decides
            return run
        return upcoming

    def _release_meta_updated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        assert self.policies is not None
        changes = channel_changes(old, new)
        if not changes:
            return
        namespace = str((new.get("metadata") or {}).get("namespace") or "")
        module = module_of_release_meta(new)
        versions = channel_versions(new)
        for channel, before in changes.items():
            after = versions[channel]
            if not newer(after, before):
                continue  # a channel moved back is no rollout
            policy = matching_policy(self.policies.list(namespace), module, channel)
            if policy is None:
                continue
            try:
                upcoming = ModuleRollout.from_object(
                    run_body(namespace, module, channel, before, after, policy)
                )
            except InvalidObjectError:
                continue  # the run would be Invalid: it holds nobody
            self._starting[(namespace, module, channel)] = (self._clock.now() + self.hold_for, upcoming)

    def lookup(self, namespace: str) -> RolloutLookup:
        """The look-up ``resolve()`` is given for the Kymas of ``namespace``."""
        return lambda module, channel: self.run_for(namespace, module, channel)

    def _parse(self, obj: Mapping[str, Any]) -> ModuleRollout | None:
        """The parsed run (None: it does not parse; the leader marks it Invalid: it holds nobody)."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        rv = str(meta.get("resourceVersion") or "")
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == rv:
            return cached[1]
        try:
            run: ModuleRollout | None = ModuleRollout.from_object(obj)
        except InvalidObjectError:
            run = None
        if len(self._parsed) > 4 * max(16, len(self.rollouts)):
            self._parsed.clear()  # runs come and go rarely: drop the memory of deleted ones at once
        self._parsed[key] = (rv, run)
        return run
