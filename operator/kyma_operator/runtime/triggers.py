"""Why a reconcile ran: the reasons its request was added with, handed to exactly that reconcile.

A work queue keeps only keys, so "why" is lost once requests from several sources are deduplicated.
Every source therefore adds a request together with its reason (``Enqueuer.add(request, reason)``,
see ``source.py``). The controller's ``TriggerLog`` keeps the reasons of adds the queue actually
accepted (an event refused with 429 leaves no trace), the worker takes them when it takes the
request, and the reconcile reads them with :func:`current_triggers` (a context variable the worker
sets for that one reconcile). A reconcile with no reason is a requeue (backoff, readiness polling,
safety net) unless its ``Result.reason`` said otherwise.

Reasons are for logs, metrics and the local run's output; reconcilers stay level-based.
"""

from __future__ import annotations

from contextvars import ContextVar

from kyma_operator.runtime.request import Request

__all__ = ["TriggerLog", "current_triggers"]

_MAX_REASONS = 8

_current: ContextVar[tuple[str, ...]] = ContextVar("kyma_operator_reconcile_triggers", default=())


def current_triggers() -> tuple[str, ...]:
    """The reasons the running reconcile's request was added with (empty outside a reconcile)."""
    return _current.get()


class TriggerLog:
    """Reasons noted per request until its next reconcile takes them (at most 8 distinct each).

    One reason (the common case) is kept as the string itself: noting costs one dict look-up and
    one store on the hot path of every add.
    """

    def __init__(self) -> None:
        self._reasons: dict[Request, str | dict[str, None]] = {}

    def note(self, request: Request, reason: str) -> None:
        reasons = self._reasons.get(request)
        if reasons is None:
            self._reasons[request] = reason
        elif isinstance(reasons, str):
            if reasons != reason:
                self._reasons[request] = {reasons: None, reason: None}
        elif len(reasons) < _MAX_REASONS:
            reasons[reason] = None

    def take(self, request: Request) -> tuple[str, ...]:
        reasons = self._reasons.pop(request, None)
        if reasons is None:
            return ()
        if isinstance(reasons, str):
            return (reasons,)
        return tuple(reasons)

    def activate(self, request: Request) -> object:
        """Take ``request``'s reasons and make them :func:`current_triggers` (returns a reset token)."""
        return _current.set(self.take(request))

    @staticmethod
    def deactivate(token: object) -> None:
        _current.reset(token)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._reasons)
