"""What wakes the rollout machinery: informer events only, no poll loop (docs/rollouts.md §7.2).

* ``ManifestToRollout`` (leader's rollout controller): a Manifest's ``spec.version``,
  ``status.state`` or ``status.observedGeneration`` changed, or it appeared or went -> the run named
  by its ``operator.kyma-project.io/rollout`` label (or ``reverted-by`` annotation); a Manifest
  without either (a released Kyma still at the old version, a member leaving) -> the runs still
  going for its module and channel. The work queue coalesces: 500 canary Manifests turning Ready
  within a second cost a few reconciles of the run, not 500. The time a Manifest is first seen in
  ``Error`` is noted for the halt-latency metric.
* ``RolloutToKymas`` (the Kyma controller, every replica): a run's frontier moved -> the Kymas of
  the module that the move released (a pure function over the replica's Kyma cache; the shard gate
  drops the ones another replica holds), optionally spread by the wave's ``spread``; a run that
  starts or ends holding Kymas back (``Reverting``, ``Invalid``, ``Superseded``, deleted) -> every
  user of the module, at once.
* ``MrmToStarter`` (leader's starter controller): a ModuleReleaseMeta added (the initial list
  included: the catch-up of §12) or its channel versions changed -> the release meta, with the
  versions the changed channels were at noted in the starter; a policy added or changed -> every
  release meta of its namespace.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.modulerollout import (
    MANDATORY_CHANNEL,
    TERMINAL_PHASES,
    ModuleRollout,
    Phase,
    parse_duration,
)
from kyma_operator.rollouts.starter import RolloutStarter, channel_changes
from kyma_operator.runtime.clock import Clock, RealClock
from kyma_operator.runtime.informer import FuncHandler, Informer
from kyma_operator.runtime.objects import JSON
from kyma_operator.runtime.request import Request
from kyma_operator.runtime.source import Enqueuer

MANIFEST_CHANGED = "manifest changed"
RELEASED = "rollout released"
RELEASE_META_CHANGED = "release meta changed"
POLICY_CHANGED = "rollout policy changed"

Released = Callable[[ModuleRollout, JSON], bool]
"""Whether a Kyma (cached object) is inside a run's frontier (``rollouts.waves``)."""

HOLDING_CHANGES = frozenset({Phase.REVERTING, Phase.INVALID, Phase.SUPERSEDED})
"""Entering one of these changes the target of Kymas outside the frontier too."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _sub(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _parse(obj: Mapping[str, Any]) -> ModuleRollout | None:
    try:
        return ModuleRollout.from_object(obj)
    except InvalidObjectError:
        return None


def manifest_rollout_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """What a rollout gate reads of a Manifest changed: version, state, observed generation, labels
    (the rollout label), annotations (``reverted-by``) or deletion."""
    a, b = _sub(old, "status"), _sub(new, "status")
    if a.get("state") != b.get("state") or a.get("observedGeneration") != b.get("observedGeneration"):
        return True
    if _sub(old, "spec").get("version") != _sub(new, "spec").get("version"):
        return True
    ma, mb = _meta(old), _meta(new)
    return (
        ma.get("generation") != mb.get("generation")
        or ma.get("deletionTimestamp") != mb.get("deletionTimestamp")
        or (ma.get("labels") or {}).get(names.ROLLOUT_LABEL)
        != (mb.get("labels") or {}).get(names.ROLLOUT_LABEL)
        or (ma.get("annotations") or {}).get(names.REVERTED_BY_ANNOTATION)
        != (mb.get("annotations") or {}).get(names.REVERTED_BY_ANNOTATION)
    )


def _manifest_channel(manifest: Mapping[str, Any]) -> tuple[str, str] | None:
    labels = _meta(manifest).get("labels") or {}
    module = labels.get(names.MODULE_NAME_LABEL)
    if not module:
        return None
    if labels.get(names.MANDATORY_MODULE_LABEL) == names.ENABLE_LABEL_VALUE:
        return str(module), MANDATORY_CHANNEL
    channel = labels.get(names.CHANNEL_LABEL)
    return (str(module), str(channel)) if channel else None


class ManifestToRollout:
    """Source: Manifest changes -> the run(s) they concern (see the module docstring)."""

    def __init__(
        self,
        manifests: Informer,
        rollouts: Informer,
        *,
        clock: Clock | None = None,
        on_failure_seen: Callable[[Request, float], None] | None = None,
        on_written: Callable[[str, str], None] | None = None,
    ) -> None:
        """``on_failure_seen(run, at)``: a member's Manifest turned Error (halt latency starts);
        ``on_written(module, kind)``: a Manifest's version was written by a run, ``upgrade`` (its
        ``rollout`` label) or ``revert`` (its ``reverted-by`` annotation)."""
        self.manifests = manifests
        self.rollouts = rollouts
        self._clock = clock or RealClock()
        self._on_failure_seen = on_failure_seen
        self._on_written = on_written
        self._queue: Enqueuer | None = None

    def bind(self, queue: Enqueuer) -> None:
        self._queue = queue
        self.manifests.add_handler(
            FuncHandler(on_add=self._changed, on_update=self._updated, on_delete=self._changed)
        )

    def runs_for(self, manifest: Mapping[str, Any]) -> list[Request]:
        namespace = str(_meta(manifest).get("namespace") or "")
        named = {
            (_meta(manifest).get("labels") or {}).get(names.ROLLOUT_LABEL),
            (_meta(manifest).get("annotations") or {}).get(names.REVERTED_BY_ANNOTATION),
        }
        found = [Request(namespace, str(n)) for n in named if n]
        if found:
            return found
        module_channel = _manifest_channel(manifest)
        if module_channel is None:
            return []
        module, channel = module_channel
        for run in self.rollouts.list(namespace):
            spec, status = _sub(run, "spec"), _sub(run, "status")
            if spec.get("module") != module or spec.get("channel") != channel:
                continue
            if status.get("phase") in TERMINAL_PHASES:
                continue
            found.append(Request.for_object(run))
        return found

    def _version_written(self, manifest: JSON) -> None:
        meta = _meta(manifest)
        module = str((meta.get("labels") or {}).get(names.MODULE_NAME_LABEL) or "")
        if (meta.get("annotations") or {}).get(names.REVERTED_BY_ANNOTATION):
            if self._on_written is not None:
                self._on_written(module, "revert")
        elif (meta.get("labels") or {}).get(names.ROLLOUT_LABEL) and self._on_written is not None:
            self._on_written(module, "upgrade")

    def _changed(self, obj: JSON) -> None:
        queue = self._queue
        if queue is None:
            return
        for request in self.runs_for(obj):
            queue.add(request, MANIFEST_CHANGED)

    def _updated(self, old: JSON, new: JSON) -> None:
        if not manifest_rollout_change(old, new):
            return
        if _sub(old, "spec").get("version") != _sub(new, "spec").get("version"):
            self._version_written(new)
        if (
            self._on_failure_seen is not None
            and _sub(new, "status").get("state") == "Error"
            and _sub(old, "status").get("state") != "Error"
        ):
            now = self._clock.now()
            for request in self.runs_for(new):
                self._on_failure_seen(request, now)
        self._changed(new)


class RolloutToKymas:
    """Source: a run's frontier or holding phase changed -> the Kymas whose target it changed."""

    def __init__(
        self,
        rollouts: Informer,
        kymas: Informer,
        released: Released,
        *,
        users_index: str | None = None,
        rng: Callable[[], float] | None = None,
    ) -> None:
        """``users_index``: the Kyma informer's index of the module names in ``status.modules``
        (the Kyma controller's); without it every Kyma of the namespace is a candidate."""
        self.rollouts = rollouts
        self.kymas = kymas
        self.released = released
        self.users_index = users_index
        self._rng = rng or random.random
        self._queue: Enqueuer | None = None
        self.enqueued = 0

    def bind(self, queue: Enqueuer) -> None:
        self._queue = queue
        self.rollouts.add_handler(FuncHandler(on_update=self._updated, on_delete=self._deleted))

    def _users(self, run: ModuleRollout) -> list[JSON]:
        namespace = run.namespace
        if run.spec.channel == MANDATORY_CHANNEL:
            return self.kymas.list(namespace)
        if self.users_index is None:
            return self.kymas.list(namespace)
        users = self.kymas.by_index(self.users_index, run.spec.module)
        return [k for k in users if _meta(k).get("namespace") == namespace]

    def _add(self, kyma: JSON, delay: float) -> None:
        assert self._queue is not None
        request = Request.for_object(kyma)
        self.enqueued += 1
        if delay > 0:
            self._queue.add_after(request, delay, RELEASED)
        else:
            self._queue.add(request, RELEASED)

    def _updated(self, old_obj: JSON, new_obj: JSON) -> None:
        if self._queue is None or not self.kymas.synced.is_set():
            return
        old, new = _parse(old_obj), _parse(new_obj)
        if new is None:
            return
        if old is None or (new.phase() in HOLDING_CHANGES and old.phase() != new.phase()):
            for kyma in self._users(new):
                self._add(kyma, 0.0)
            return
        if old.status.frontier == new.status.frontier:
            return
        spread = self._spread(new)
        for kyma in self._users(new):
            if self.released(new, kyma) and not self.released(old, kyma):
                self._add(kyma, self._rng() * spread if spread else 0.0)

    def _deleted(self, obj: JSON) -> None:
        if self._queue is None:
            return
        run = _parse(obj)
        if run is None or run.phase() in TERMINAL_PHASES - {Phase.REVERTED}:
            return  # it held nobody back any more
        for kyma in self._users(run):
            self._add(kyma, 0.0)

    @staticmethod
    def _spread(run: ModuleRollout) -> float:
        waves = run.spec.policy.waves
        index = run.status.frontier.wave
        if index >= len(waves) or waves[index].spread is None:
            return 0.0
        return parse_duration(waves[index].spread or "0s") or 0.0


class MrmToStarter:
    """Source: ModuleReleaseMeta added or channel versions changed -> the starter; a policy added
    or changed -> every release meta of its namespace (a policy created after a move governs it)."""

    def __init__(
        self, release_metas: Informer, starter: RolloutStarter, policies: Informer | None = None
    ) -> None:
        self.release_metas = release_metas
        self.starter = starter
        self.policies = policies
        self._queue: Enqueuer | None = None

    @property
    def informer(self) -> Informer:
        return self.release_metas

    def bind(self, queue: Enqueuer) -> None:
        self._queue = queue
        self.release_metas.add_handler(
            FuncHandler(on_add=self._added, on_update=self._updated, on_delete=self._deleted)
        )
        if self.policies is not None:
            self.policies.add_handler(
                FuncHandler(on_add=self._policy_changed, on_update=self._policy_updated)
            )

    def _policy_changed(self, policy: JSON) -> None:
        if self._queue is None:
            return
        for meta in self.release_metas.list(str(_meta(policy).get("namespace") or "")):
            self._queue.add(Request.for_object(meta), POLICY_CHANGED)

    def _policy_updated(self, old: JSON, new: JSON) -> None:
        if _meta(old).get("generation") != _meta(new).get("generation"):
            self._policy_changed(new)

    def _added(self, obj: JSON) -> None:
        if self._queue is not None:
            self._queue.add(Request.for_object(obj), RELEASE_META_CHANGED)

    def _updated(self, old: JSON, new: JSON) -> None:
        changes = channel_changes(old, new)
        if not changes or self._queue is None:
            return
        request = Request.for_object(new)
        self.starter.note_change(request, changes)
        self._queue.add(request, RELEASE_META_CHANGED)

    def _deleted(self, obj: JSON) -> None:
        self.starter.forget(Request.for_object(obj))
