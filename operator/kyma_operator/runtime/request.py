"""The unit of work of a controller and what a reconcile answers.

Mirrors controller-runtime's ``reconcile.Request`` / ``reconcile.Result``: a request names an
object (never carries it; reconcilers read current state), a result may ask for a later retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


class Request(NamedTuple):
    """Reconcile the object ``namespace/name`` (namespace ``""`` for cluster-scoped objects).

    A named tuple, not a dataclass: requests are dict and set keys on every hot path (the work
    queue, the intake's throttle, the rate limiter), and a fresh request for a key already stored
    is compared with it. A tuple hashes and compares in C; a frozen dataclass calls a generated
    Python ``__eq__`` and our ``__hash__``. Two adds of fresh requests, take and done per key:
    3.0 -> 1.7 us (``benchmarks/queue_bench.py --requests``, the dataclass as the other tree).
    Ordered, hashed and pickled as ``(namespace, name)``; like any tuple it equals a tuple of the
    same two strings (the listener's ``ObjectRef`` too), so a dict keys on one of the two types.
    """

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def for_object(cls, obj: dict[str, Any]) -> Request:
        """The request for an object dict (its ``metadata.namespace`` / ``metadata.name``)."""
        meta = obj.get("metadata") or {}
        return cls(meta.get("namespace") or "", meta["name"])


PERIODIC_EARLY = 0.05
"""Share of a periodic requeue's delay by which it may come early (``Result.periodic``): 5 %, so a
Kyma's 150 s safety net may join others up to 7.5 s before its own deadline (1,800 s: 90 s). At
most 5 % more safety-net reconciles; a resync scattered over a few seconds runs back to back."""


@dataclass(frozen=True, slots=True)
class Result:
    """What to do after a successful reconcile.

    ``requeue_after``: reconcile again after that many seconds (the per-item backoff is reset).
    ``requeue``: reconcile again after the rate limiter's backoff (like a failure, but not logged
    as an error). Neither: done until the next event.
    """

    requeue_after: float | None = None
    requeue: bool = False
    reason: str | None = None
    """Why the reconciler asks to run again: a note for logs and metrics (shown among the next run's
    triggers, see ``triggers``). Never state: what a later run must know lives in the reconciler's
    memory of the object."""
    periodic: bool = False
    """``requeue_after`` is the periodic safety net, not the time something falls due (a
    maintenance window, a check, a soak time): the queue may run it up to ``PERIODIC_EARLY`` of the
    delay early, when the queue's timer fires for another request (``WorkQueue.add_after(early=...)``)."""

    @property
    def early(self) -> float:
        """Seconds before ``requeue_after`` this request may be run with others (0: not periodic)."""
        return PERIODIC_EARLY * self.requeue_after if self.periodic and self.requeue_after else 0.0

    def __post_init__(self) -> None:
        if self.requeue_after is not None and self.requeue_after < 0:
            raise ValueError(f"requeue_after must not be negative, got {self.requeue_after}")
