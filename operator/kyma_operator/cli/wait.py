"""The one "wait until the modules are done" loop of ``kyma install`` and ``kyma module enable|disable``.

Why: both follow a Kyma's ``status.modules[]`` until every module is Ready (or removed), and both
must not believe a status written *before* their own change (issue 24 item 8: a re-run of
``kyma install`` after a fixed cause exited 1 at once with the previous run's Error; ``disable
--wait`` from Error exited 1 although the module was then removed). Freshness is decided with:

- the generation: the operator stamps every Kyma condition it writes with the Kyma's
  ``metadata.generation`` (``observedGeneration``, as upstream). When the command's change bumped
  the generation of a Kyma whose status the operator writes itself (a single-cluster Kyma, label
  ``operator.kyma-project.io/sync=false``), a status whose ``Modules`` condition observed an older
  generation is not looked at at all (neither done nor failed). Observing the new generation is not
  enough for an Error, though: the Kyma's entry may still echo its Manifest's status from before, so
  the rules below apply on top. A runtime's copy of the Kyma: the operator copies the status into
  it with every condition's ``observedGeneration`` set to the copy's own generation as read in the
  round whose spec the status answers, and marks the copy with the annotation
  ``operator.kyma-project.io/status-observed-generation: runtime``; with that mark the copy's
  generation is awaited the same way. Without it (upstream's operator, an older one of ours: the
  conditions carry the control plane's generations, which say nothing about the runtime's spec)
  only the rules below decide;
- the command records each module's entry as it was right after its own change (``baseline``);
- an entry that differs from it (state, message, version, channel, the tracked Manifest's
  generation, ...) was written after the change, and its Error is the answer;
- an Error identical to the baseline is stale: the loop keeps waiting for the operator's next word
  and says so, and a time-out names the stale Error;
- a caller that runs the reconcilers itself (``kyma install``) knows better than the entry: it
  *confirms* every Error once its own reconcile of that module concluded it (see ``install.py``),
  fresh-looking or not, since the Kyma's entry can echo a Manifest's status from before the run;
- "removed" is done as soon as the entry is gone, whatever it said before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from kyma_operator.api import names
from kyma_operator.api.kyma import KymaConditionType
from kyma_operator.api.meta import State
from kyma_operator.cli.errors import WaitFailed
from kyma_operator.cli.output import note, stderr

Entry = dict[str, Any]
ReadKyma = Callable[[], Awaitable[dict[str, Any]]]
Confirm = Callable[[str, Entry], Awaitable[str | None]]
"""``(module, entry) -> message`` when the caller knows a stale-looking Error is the current answer."""


@dataclass(frozen=True)
class Goal:
    """What "done" means: every module Ready (on ``channel`` when given), or every module removed."""

    removed: bool = False
    channel: str | None = None

    @property
    def word(self) -> str:
        return "removed" if self.removed else "Ready"


def module_entries(kyma: Mapping[str, Any]) -> dict[str, Entry]:
    """``status.modules[]`` of a Kyma object by module name."""
    modules = (kyma.get("status") or {}).get("modules") or []
    return {str(m.get("name")): dict(m) for m in modules if isinstance(m, dict) and m.get("name")}


def observed_generation(kyma: Mapping[str, Any]) -> int | None:
    """``observedGeneration`` of the Kyma's ``Modules`` condition (written with ``status.modules``)."""
    for condition in (kyma.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == KymaConditionType.MODULES.value:
            value = condition.get("observedGeneration")
            return value if isinstance(value, int) else None
    return None


def awaited_generation(after_change: Mapping[str, Any]) -> int | None:
    """The generation whose status answers the command, from the Kyma as its change left it: its
    ``metadata.generation`` when the status observes this object's generations (a single-cluster
    Kyma, or a runtime copy marked by the operator) and had not yet observed it then; None when the
    generation cannot tell (an unmarked runtime copy, or no spec change: the status already
    observed this generation)."""
    metadata = after_change.get("metadata") or {}
    single_cluster = (metadata.get("labels") or {}).get(names.SYNC_LABEL) == names.DISABLE_LABEL_VALUE
    annotations = metadata.get("annotations") or {}
    marked = annotations.get(names.STATUS_GENERATION_ANNOTATION) == names.STATUS_GENERATION_RUNTIME
    if not (single_cluster or marked):
        return None
    generation = metadata.get("generation")
    if not isinstance(generation, int):
        return None
    seen = observed_generation(after_change)
    return generation if seen is None or seen < generation else None


def _state(entry: Entry | None) -> State | None:
    if entry is None:
        return None
    try:
        return State(str(entry.get("state") or ""))
    except ValueError:
        return None


def is_done(goal: Goal, entry: Entry | None) -> bool:
    if goal.removed:
        return entry is None
    on_channel = goal.channel is None or (entry or {}).get("channel") == goal.channel
    return _state(entry) is State.READY and on_channel


def is_fresh(entry: Entry | None, baseline: Entry | None) -> bool:
    """Written after the command's change: the entry is not the one recorded right after it."""
    return entry != baseline


@dataclass
class _Progress:
    """One line per state change (a spinner line on a terminal), nothing with ``quiet``."""

    quiet: bool

    def __post_init__(self) -> None:
        console: Console = stderr()
        self.status = (
            console.status("waiting", spinner="dots") if (console.is_terminal and not self.quiet) else None
        )
        self.seen: dict[str, str] = {}
        if self.status is not None:
            self.status.start()

    def show(self, module: str, text: str) -> None:
        if self.seen.get(module) == text:
            return
        self.seen[module] = text
        if self.status is not None:
            self.status.update(f"{module}: {text}")
        elif not self.quiet:
            note(f"{module}: {text}")

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


def _describe(entry: Entry | None, goal: Goal, stale: bool) -> str:
    state = _state(entry)
    if entry is None:
        return "removed" if goal.removed else "not reported yet"
    text = state.value if state is not None else str(entry.get("state") or "no state")
    message = entry.get("message")
    if message:
        text += f" ({message})"
    if stale and state is State.ERROR:
        text += ": reported before this command, waiting for the operator's new status"
    return text


async def wait_for_modules(
    read: ReadKyma,
    modules: list[str],
    goal: Goal,
    baseline: Mapping[str, Entry | None],
    *,
    limit: float,
    quiet: bool,
    interval: float,
    confirm: Confirm | None = None,
    generation: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Poll ``read()`` every ``interval`` seconds until every module in ``modules`` meets ``goal``;
    returns the Kyma then. Raises ``WaitFailed`` with the module's message when one turns to Error
    after the change (with ``confirm``: when it confirms the Error), or when ``limit`` seconds pass.
    ``generation`` (``awaited_generation``): only a status that observed it counts at all."""
    deadline = clock() + limit
    progress = _Progress(quiet)
    try:
        while True:
            kyma = await read()
            entries = module_entries(kyma)
            seen = observed_generation(kyma)
            current = generation is None or (seen is not None and seen >= generation)
            for module in modules:
                entry = entries.get(module)
                fresh = is_fresh(entry, baseline.get(module))
                if not current:
                    progress.show(module, "waiting for the operator to observe this change")
                    continue
                progress.show(module, _describe(entry, goal, stale=not fresh))
                if _state(entry) is not State.ERROR or entry is None:
                    continue
                message = str(entry.get("message") or "") or None
                if confirm is not None:
                    message = await confirm(module, entry)
                    if message is None:
                        continue
                elif not fresh:
                    continue
                raise WaitFailed(f"module {module} is in Error: {message or 'no message'}")
            if current and all(is_done(goal, entries.get(m)) for m in modules):
                return kyma
            if clock() > deadline:
                if not current:
                    observed = seen if seen is not None else "none"
                    raise WaitFailed(
                        f"the operator has not reported on this change after {limit:g}s (the Kyma's "
                        f"generation is {generation}, its status observed {observed}): "
                        "is the operator running?"
                    )
                raise WaitFailed(_timeout_message(modules, entries, goal, baseline, limit))
            await asyncio.sleep(interval)  # a user-facing wait: polls with a deadline
    finally:
        progress.stop()


def _timeout_message(
    modules: list[str],
    entries: Mapping[str, Entry],
    goal: Goal,
    baseline: Mapping[str, Entry | None],
    limit: float,
) -> str:
    pending = [m for m in modules if not is_done(goal, entries.get(m))]
    parts = []
    for module in pending:
        entry = entries.get(module)
        state = _state(entry)
        text = f"{module}={state.value if state is not None else 'not reported'}"
        if state is State.ERROR and not is_fresh(entry, baseline.get(module)):
            text += f" (still the Error from before this command: {entry.get('message') if entry else ''})"
        parts.append(text)
    what = f"module {pending[0]}" if len(modules) == 1 else "modules"
    return f"{what} not {goal.word} after {limit:g}s ({', '.join(parts)})"
