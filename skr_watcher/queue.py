"""The bounded, coalescing send queue between the admission handler and the sender tasks.

Admissions must be answered in milliseconds, so the handler only puts an event here and returns.
Events are hints for level-based reconcilers, so a burst of updates to one object needs to reach KCP
once, with the latest content: entries are keyed by (manager, GVK, namespace, name) and a new event
for a key that is still waiting replaces it in place (keeping its place in line). A pending DELETE is
never overwritten by a later CREATE/UPDATE (that becomes a second entry), and a pending RESYNC is not
downgraded by an ordinary event for the same object. When the queue is full the oldest entry is
dropped and returned, so the caller can count it and schedule a resync.

An entry keeps the event's fields in slots, not the validated ``AgentEvent`` it came from: the
pydantic instance with its ``ObjectKey`` (each with a ``__dict__`` and a fields-set) took ~1.3 KB per
waiting event, a queue of 1,000 objects while KCP is down ~1.3 MB of the agent's peak memory
(issue 18). The event was validated once at the boundary (admission); ``QueuedEvent.event``
rebuilds the wire model without validating again, only when it is sent or logged.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
from collections import OrderedDict
from dataclasses import dataclass

from kyma_wire.events import AgentEvent, GroupVersionKind, ObjectKey, Operation


@dataclass(frozen=True, slots=True)
class EventKey:
    """Identity for coalescing: one pending event per watched object and manager."""

    manager: str
    group: str
    version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, manager: str, event: AgentEvent) -> EventKey:
        gvk, watched = event.watched_gvk, event.watched
        return cls(manager, gvk.group, gvk.version, gvk.kind, watched.namespace, watched.name)


@dataclass(slots=True, eq=False)
class QueuedEvent:
    """One entry: the latest event for its key (its fields, see the module docstring), plus bookkeeping."""

    key: EventKey
    gvk: GroupVersionKind
    """Shared per kind (``skr_watcher.admission`` caches them; the model is frozen)."""
    operation: Operation | None
    owner: tuple[str, str] | None
    observed_at: datetime.datetime | None
    enqueued_at: float
    """Monotonic time of the first event that this entry absorbed (for delivery latency)."""
    coalesced: int = 0
    seq: int = 0

    @classmethod
    def of(cls, key: EventKey, event: AgentEvent, enqueued_at: float, seq: int = 0) -> QueuedEvent:
        entry = cls(key, event.watched_gvk, None, None, None, enqueued_at, seq=seq)
        entry.take(event)
        return entry

    def take(self, event: AgentEvent) -> None:
        """Carry ``event``'s content from now on (same key)."""
        owner = event.owner
        self.operation = event.operation
        self.owner = None if owner is None else (sys.intern(owner.namespace), owner.name)
        self.observed_at = event.observed_at

    @property
    def manager(self) -> str:
        return self.key.manager

    @property
    def event(self) -> AgentEvent:
        """The wire model of this entry (built without validating again: its parts were validated)."""
        key, owner = self.key, self.owner
        return AgentEvent.model_construct(
            watched=ObjectKey.model_construct(namespace=key.namespace, name=key.name),
            watched_gvk=self.gvk,
            operation=self.operation,
            owner=None if owner is None else ObjectKey.model_construct(namespace=owner[0], name=owner[1]),
            observed_at=self.observed_at,
        )

    def to_wire(self) -> bytes:
        return self.event.to_wire()


@dataclass(frozen=True, slots=True)
class PutResult:
    coalesced: bool
    """The event was merged into an entry that was already waiting."""
    dropped: QueuedEvent | None = None
    """The oldest entry, dropped to make room (the queue was full)."""


def can_absorb(pending: Operation | None, new: Operation | None) -> bool:
    """Whether a waiting entry with operation ``pending`` may take over an event with ``new``."""
    if pending is Operation.DELETE:
        return new is Operation.DELETE
    return True


def keeps_pending(pending: Operation | None, new: Operation | None) -> bool:
    """Latest wins, except that an ordinary event does not downgrade a pending RESYNC."""
    return pending is Operation.RESYNC and new in (Operation.CREATE, Operation.UPDATE, None)


def supersedes(pending: Operation | None, in_flight: Operation | None) -> bool:
    """Whether a waiting entry makes a still-undelivered event for the same key unnecessary."""
    if in_flight is Operation.DELETE:
        return pending is Operation.DELETE
    if in_flight is Operation.RESYNC:
        return pending is Operation.RESYNC
    return True


class SendQueue:
    """FIFO of coalesced entries with a capacity; ``get`` waits for the next entry."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._maxsize = maxsize
        self._entries: OrderedDict[int, QueuedEvent] = OrderedDict()
        self._pending: dict[EventKey, QueuedEvent] = {}
        self._taken: dict[EventKey, QueuedEvent] = {}
        """The newest entry per key that a sender took and has not finished (``done``)."""
        self._seq = 0
        self._nonempty = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, manager: str, event: AgentEvent, now: float) -> PutResult:
        """Queue or coalesce ``event``; never blocks. ``now`` is the caller's monotonic time."""
        key = EventKey.of(manager, event)
        existing = self._pending.get(key)
        if existing is not None and can_absorb(existing.operation, event.operation):
            if not keeps_pending(existing.operation, event.operation):
                existing.take(event)
            existing.coalesced += 1
            return PutResult(coalesced=True)
        dropped = self._remove_oldest() if len(self._entries) >= self._maxsize else None
        self._seq += 1
        entry = QueuedEvent.of(key, event, now, seq=self._seq)
        self._entries[self._seq] = entry
        self._pending[key] = entry
        self._nonempty.set()
        return PutResult(coalesced=False, dropped=dropped)

    def get_nowait(self) -> QueuedEvent | None:
        """The oldest entry, or None when empty."""
        return self._take() if self._entries else None

    async def get(self) -> QueuedEvent | None:
        """Wait for the oldest entry; None once the queue is closed and empty."""
        while not self._entries:
            if self._closed:
                return None
            self._nonempty.clear()
            await self._nonempty.wait()
        return self._take()

    def take_more(self, manager: str, limit: int) -> list[QueuedEvent]:
        """Up to ``limit`` more of the oldest entries for ``manager`` (a batch), without waiting."""
        if limit <= 0 or not self._entries:
            return []
        seqs: list[int] = []
        for seq, entry in self._entries.items():
            if entry.key.manager == manager:
                seqs.append(seq)
                if len(seqs) == limit:
                    break
        taken = []
        for seq in seqs:
            entry = self._entries.pop(seq)
            if self._pending.get(entry.key) is entry:
                del self._pending[entry.key]
            self._taken[entry.key] = entry
            taken.append(entry)
        if not self._entries and not self._closed:
            self._nonempty.clear()
        return taken

    def is_superseded(self, entry: QueuedEvent) -> bool:
        """True when a newer entry for the same key (waiting, or taken by another sender) makes
        ``entry`` unnecessary."""
        operation = entry.operation
        pending = self._pending.get(entry.key)
        if pending is not None and supersedes(pending.operation, operation):
            return True
        taken = self._taken.get(entry.key)
        return taken is not None and taken.seq > entry.seq and supersedes(taken.operation, operation)

    def done(self, entry: QueuedEvent) -> None:
        """A sender finished with ``entry`` (delivered, dropped or abandoned)."""
        if self._taken.get(entry.key) is entry:
            del self._taken[entry.key]

    def close(self) -> None:
        """Wake all waiters; ``get`` returns the remaining entries, then None."""
        self._closed = True
        self._nonempty.set()

    def _take(self) -> QueuedEvent:
        entry = self._remove_oldest()
        self._taken[entry.key] = entry
        return entry

    def _remove_oldest(self) -> QueuedEvent:
        _, entry = self._entries.popitem(last=False)
        if self._pending.get(entry.key) is entry:
            del self._pending[entry.key]
        if not self._entries and not self._closed:
            self._nonempty.clear()
        return entry
