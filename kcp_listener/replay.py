"""Replay protection for signed events: each (keyid, nonce) is accepted at most once.

Why: a signature alone proves who sent a request, not that it is new; anyone on the path could
resend a captured event. The signature profile bounds a request's lifetime (``created`` at most
``max_age`` old, ``skew`` into the future), so a nonce only has to be remembered until its
``created + max_age + skew`` has passed; after that the time check rejects the request anyway.

Memory is bounded twice: entries expire (a heap ordered by expiry is purged on every call) and
the cache holds at most ``max_entries``. When it is full of unexpired entries, ``check`` answers
``FULL`` and the listener sends 429: it never forgets a live nonce to make room, which would
reopen the replay window. Coherent because only the leader serves events.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from enum import Enum

__all__ = ["ReplayCache", "ReplayVerdict"]


class ReplayVerdict(Enum):
    NEW = "new"
    REPLAY = "replay"
    FULL = "full"


class ReplayCache:
    def __init__(self, *, max_age: float, skew: float, max_entries: int, clock: Callable[[], float]) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self._ttl = max_age + skew
        self._max_entries = max_entries
        self._clock = clock
        self._expiry: dict[tuple[str, str], float] = {}
        self._heap: list[tuple[float, tuple[str, str]]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def _purge(self, now: float) -> None:
        heap = self._heap
        expiry = self._expiry
        while heap and heap[0][0] <= now:
            at, key = heapq.heappop(heap)
            if expiry.get(key) == at:
                del expiry[key]

    def check(self, key_id: str, nonce: str) -> ReplayVerdict:
        """Whether the nonce is new, without remembering it (see :meth:`remember`)."""
        self._purge(self._clock())
        if (key_id, nonce) in self._expiry:
            return ReplayVerdict.REPLAY
        if len(self._expiry) >= self._max_entries:
            return ReplayVerdict.FULL
        return ReplayVerdict.NEW

    def remember(self, key_id: str, nonce: str, created: float) -> None:
        """Record a nonce as used until its signature can no longer pass the time check."""
        key = (key_id, nonce)
        at = max(created + self._ttl, self._clock())
        if key in self._expiry:
            at = max(at, self._expiry[key])
        self._expiry[key] = at
        heapq.heappush(self._heap, (at, key))
