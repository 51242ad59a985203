"""Which wave a Kyma is in and whether a run's frontier has released it (docs/rollouts.md §6.1-6.3).

Why a pure function: moving a rollout forward must cost one status write of the run, not a write
per Kyma, and every replica (any shard holder, the leader, the CLI) must reach the same answer from
the run and the Kyma alone. So a Kyma's wave is the first selector wave matching its labels, else a
salted SHA-256 of its runtime id placed against the cumulative percentages; inside a wave a second
salted hash orders the Kymas for ``maxConcurrency``. Nothing is stored per Kyma; a Kyma created
mid-rollout lands deterministically; no fleet listing or fleet size is needed.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kyma_operator.api import names
from kyma_operator.api.modulerollout import Frontier, ModuleRollout, ModuleRolloutPolicySpec

_WAVE_SALT = "wave"
_ORDER_SALT = "order"


@functools.lru_cache(maxsize=32768)  # a step places every member; ~10,000 entries per 5,000-Kyma run
def unit_hash(*parts: str) -> float:
    """A uniform value in [0, 1) from ``parts``: the first 8 bytes of SHA-256 of the parts joined by
    NUL, big-endian, over 2**64. Stable across processes, platforms and Python versions."""
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def runtime_id(labels: Mapping[str, str], name: str) -> str:
    """The identity the wave hash uses: label ``kyma-project.io/runtime-id``, else the Kyma's name
    (the key sharding hashes too; salted here, so waves do not line up with shards)."""
    return labels.get(names.RUNTIME_ID_LABEL) or name


@dataclass(frozen=True, slots=True)
class Placement:
    """A Kyma's wave index and its within-wave order value ``order`` in [0, 1)."""

    wave: int
    order: float

    def released(self, frontier: Frontier) -> bool:
        """Covered by the frontier: an earlier wave, or the frontier's wave below its threshold."""
        if self.wave < frontier.wave:
            return True
        return self.wave == frontier.wave and self.order < frontier.threshold


def place(policy: ModuleRolloutPolicySpec, seed: str, labels: Mapping[str, str], identity: str) -> Placement:
    """The wave of a Kyma with ``labels`` and runtime id ``identity`` under ``policy`` (``seed``:
    ``policy.seed(module)``). Selector waves first (the first match wins); else the percentage
    wave whose cumulative ``upToPercent`` first exceeds the Kyma's hash."""
    order = unit_hash(seed, _ORDER_SALT, identity)
    share: float | None = None
    for index, wave in enumerate(policy.waves):
        if wave.selector is not None:
            if wave.selector.matches(labels):
                return Placement(index, order)
            continue
        if share is None:
            share = unit_hash(seed, _WAVE_SALT, identity) * 100
        assert wave.up_to_percent is not None
        if share < wave.up_to_percent:
            return Placement(index, order)
    # unreachable for a valid policy (the last wave is upToPercent: 100, and share < 100)
    return Placement(len(policy.waves) - 1, order)


def placement(run: ModuleRollout, labels: Mapping[str, str], name: str) -> Placement:
    """``place`` for a Kyma named ``name`` with ``labels`` under the run's frozen policy."""
    policy = run.spec.policy
    return place(policy, policy.seed(run.spec.module), labels, runtime_id(labels, name))


def placement_of_object(run: ModuleRollout, kyma: Mapping[str, Any]) -> Placement:
    """``placement`` of a Kyma as the informer holds it (a dict), without parsing it."""
    meta = kyma.get("metadata") or {}
    return placement(run, meta.get("labels") or {}, str(meta.get("name") or ""))


def threshold_for(orders: list[float], count: int) -> float:
    """The frontier threshold releasing the ``count`` lowest of the not-yet-released ``orders``
    (§6.3): just past the ``count``-th value (1.0 once all of them are released)."""
    ranked = sorted(orders)
    if count >= len(ranked):
        return 1.0
    if count <= 0:
        return 0.0
    return ranked[count - 1] + (ranked[count] - ranked[count - 1]) / 2
