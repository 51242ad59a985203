"""The ``RolloutLookup`` a Kyma reconcile uses: runs (and policies) as informers hold them.

Why: every Kyma reconcile asks, per module, which run (if any) governs its channel; with 5,000
Kymas that must not mean parsing every ModuleRollout each time. ``RunIndex`` parses each object
once per resourceVersion and answers from the parsed objects. An object that does not parse (a
policy the CRD could not fully check) holds nobody back: it is skipped and listed in ``invalid``,
so a broken policy never freezes the fleet (docs/rollouts.md §4). Given the policies too, it
answers ``Governed`` for a module and channel a policy selects, so a Kyma woken by a channel move
keeps its version until the leader has created that move's run (docs/rollouts.md §6.4). No I/O:
the caller passes the listings (usually ``informer.list``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.modulerollout import ModuleRollout, ModuleRolloutPolicy
from kyma_operator.rollouts.selection import choose_policy, run_in_force
from kyma_operator.rollouts.target import Governed

Listing = Callable[[], Iterable[Mapping[str, Any]]]
Model = TypeVar("Model", ModuleRollout, ModuleRolloutPolicy)


class _Parsed(Generic[Model]):
    """Objects of one kind parsed once per resourceVersion; the ones that do not parse listed."""

    def __init__(self, listing: Listing, model: type[Model]) -> None:
        self._listing = listing
        self._model: type[Model] = model
        self._cache: dict[tuple[str, str], tuple[str, Model | str]] = {}
        self.invalid: dict[str, str] = {}

    def items(self) -> list[Model]:
        seen: set[tuple[str, str]] = set()
        found: list[Model] = []
        invalid: dict[str, str] = {}
        for obj in self._listing():
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            version = str(meta.get("resourceVersion") or "")
            seen.add(key)
            cached = self._cache.get(key)
            if cached is None or cached[0] != version or not version:
                try:
                    cached = (version, self._model.from_object(obj))
                except InvalidObjectError as exc:
                    cached = (version, str(exc))
                self._cache[key] = cached
            parsed = cached[1]
            if isinstance(parsed, str):
                invalid[f"{key[0]}/{key[1]}"] = parsed
            else:
                found.append(parsed)
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        self.invalid = invalid
        return found


class RunIndex:
    """Callable as a ``RolloutLookup``: ``index(module, channel)`` -> the run in force, or, with
    ``policies``, ``Governed`` when a policy selects the module and channel, or None."""

    def __init__(self, runs: Listing, policies: Listing | None = None) -> None:
        self._runs = _Parsed(runs, ModuleRollout)
        self._policies = _Parsed(policies, ModuleRolloutPolicy) if policies is not None else None

    @property
    def invalid(self) -> dict[str, str]:
        """``namespace/name`` -> why it does not parse, for the objects skipped at the last look."""
        skipped = dict(self._runs.invalid)
        if self._policies is not None:
            skipped.update(self._policies.invalid)
        return skipped

    def runs(self) -> list[ModuleRollout]:
        """Every run that parses, from the current listing (parsed once per resourceVersion)."""
        return self._runs.items()

    def __call__(self, module: str, channel: str) -> ModuleRollout | Governed | None:
        run = run_in_force(self.runs(), module, channel)
        if self._policies is None:
            return run
        policy = choose_policy(self._policies.items(), module, channel)
        if policy is None:
            return run
        return Governed(policy.name, policy.spec.hold_channel_switches, run)
