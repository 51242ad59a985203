"""The bounded, coalescing send queue between the admission handler and the sender tasks.

Admissions must be answered in milliseconds, so the handler only puts an event here and returns.
Events are hints for level-based reconcilers, so a burst of updates to one object needs to reach KCP
once, with the latest content: entries are keyed by (manager, GVK, namespace, name) and a new event
for a key that is still waiting replaces it in place (keeping its place in line). A pending DELETE is
never overwritten by a later CREATE/UPDATE (that becomes a second entry), and a pending RESYNC is not
downgraded by an ordinary event for the same object. When the queue is full the oldest entry is
dropped and returned, so the caller can count it and schedule a resync.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from kyma_wire.events import AgentEvent, Operation


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
    """One entry: the latest event for its key, plus bookkeeping for metrics."""

    key: EventKey
    event: AgentEvent
    enqueued_at: float
    """Monotonic time of the first event that this entry absorbed (for delivery latency)."""
    coalesced: int = 0
    seq: int = field(default=0)

    @property
    def manager(self) -> str:
        return self.key.manager


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


def merged(pending: AgentEvent, new: AgentEvent) -> AgentEvent:
    """Latest wins, except that an ordinary event does not downgrade a pending RESYNC."""
    if pending.operation is Operation.RESYNC and new.operation in (Operation.CREATE, Operation.UPDATE, None):
        return pending
    return new


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
        if existing is not None and can_absorb(existing.event.operation, event.operation):
            existing.event = merged(existing.event, event)
            existing.coalesced += 1
            return PutResult(coalesced=True)
        dropped = self._remove_oldest() if len(self._entries) >= self._maxsize else None
        self._seq += 1
        entry = QueuedEvent(key, event, now, seq=self._seq)
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
        operation = entry.event.operation
        pending = self._pending.get(entry.key)
        if pending is not None and supersedes(pending.event.operation, operation):
            return True
        taken = self._taken.get(entry.key)
        return taken is not None and taken.seq > entry.seq and supersedes(taken.event.operation, operation)

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
