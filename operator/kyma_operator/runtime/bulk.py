"""Marks queue adds made while an informer hands out a whole list as bulk work.

Why: a work queue serves events before bulk work (``runtime/queue.py``), and which adds are bulk is
known only where they come from: an informer dispatching a list (its start, a relist, a newly
acquired shard's part, a handler registered on a filled cache) calls every handler once per object,
and each handler maps objects to requests its own way (a Manifest to its Kyma, a Secret to the Kymas
using it). Rather than teach every handler and source a flag, the informer marks the stretch of
synchronous dispatch, and the controller's enqueuer asks whether it is inside one. A ``ContextVar``,
so the mark never leaks into another task or thread, and set only around code that does not await.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_dispatching_a_list: ContextVar[bool] = ContextVar("dispatching_a_list", default=False)


@contextmanager
def bulk_adds() -> Iterator[None]:
    """Adds made inside (synchronously) are bulk work."""
    token = _dispatching_a_list.set(True)
    try:
        yield
    finally:
        _dispatching_a_list.reset(token)


def adding_in_bulk() -> bool:
    """Whether the caller runs inside ``bulk_adds``."""
    return _dispatching_a_list.get()
