"""The ``RolloutLookup`` a Kyma reconcile uses: runs as an informer holds them -> the run in force.

Why: every Kyma reconcile asks, per module, which run (if any) governs its channel; with 5,000
Kymas that must not mean parsing every ModuleRollout each time. ``RunIndex`` parses each object
once per resourceVersion and answers from the parsed runs. A run that does not parse (a policy the
CRD could not fully check) holds nobody back: it is skipped and counted in ``invalid``, so a broken
policy never freezes the fleet (docs/rollouts.md §4). No I/O: the caller passes the listing
(usually ``informer.list``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.modulerollout import ModuleRollout
from kyma_operator.rollouts.selection import run_in_force

Listing = Callable[[], Iterable[Mapping[str, Any]]]


class RunIndex:
    """Callable as a ``RolloutLookup``: ``index(module, channel) -> ModuleRollout | None``."""

    def __init__(self, listing: Listing) -> None:
        self._listing = listing
        self._parsed: dict[tuple[str, str], tuple[str, ModuleRollout | None]] = {}
        self.invalid: dict[str, str] = {}
        """``namespace/name`` -> why it does not parse, for the runs skipped at the last look."""

    def runs(self) -> list[ModuleRollout]:
        """Every run that parses, from the current listing (parsed once per resourceVersion)."""
        seen: set[tuple[str, str]] = set()
        runs: list[ModuleRollout] = []
        invalid: dict[str, str] = {}
        for obj in self._listing():
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            version = str(meta.get("resourceVersion") or "")
            seen.add(key)
            cached = self._parsed.get(key)
            if cached is None or cached[0] != version or not version:
                try:
                    cached = (version, ModuleRollout.from_object(obj))
                except InvalidObjectError as exc:
                    cached = (version, None)
                    invalid[f"{key[0]}/{key[1]}"] = str(exc)
                self._parsed[key] = cached
            elif cached[1] is None:
                invalid[f"{key[0]}/{key[1]}"] = self.invalid.get(f"{key[0]}/{key[1]}", "invalid")
            if cached[1] is not None:
                runs.append(cached[1])
        for gone in set(self._parsed) - seen:
            del self._parsed[gone]
        self.invalid = invalid
        return runs

    def __call__(self, module: str, channel: str) -> ModuleRollout | None:
        return run_in_force(self.runs(), module, channel)
