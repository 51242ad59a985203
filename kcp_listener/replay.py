"""Replay protection for signed events: each (keyid, nonce) is accepted at most once.

Why: a signature alone proves who sent a request, not that it is new; anyone on the path could
resend a captured event. The signature profile bounds a request's lifetime (``created`` at most
``max_age`` old, ``skew`` into the future), so a nonce only has to be remembered until its
``created + max_age + skew`` has passed; after that the time check rejects the request anyway.

Memory is bounded twice: entries expire and the cache holds at most ``max_entries``. When it is
full of unexpired entries, ``check`` answers ``FULL`` and the listener sends 429: it never forgets
a live nonce to make room, which would reopen the replay window. Coherent because only the holder
of a runtime's events (the leader, or its shard's holder) checks its nonces; what a previous holder
accepted is refused by time instead (``intake``: signatures from before the takeover plus skew).

Expiry is O(1) per request: entries are filed in one-second buckets by the whole second at or
after their expiry, and every call drops the buckets whose second has passed (a heap costs a
logarithmic push and pop per event, a measurable share of the listener's CPU budget). An entry
that expired less than a second ago may still sit in its bucket; ``check`` compares its exact
expiry, so the answer is exact, and the bound can only count it a little longer (stricter).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
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
        self._buckets: dict[int, list[tuple[str, str]]] = {}
        self._horizon = -(2**62)
        """Every bucket before this second has been dropped."""

    def __len__(self) -> int:
        return len(self._expiry)

    def _purge(self, now: float) -> None:
        if now < self._horizon:
            return
        last = math.floor(now)
        buckets = self._buckets
        due: Iterable[int]
        if last - self._horizon > len(buckets):  # a long idle gap: visit what exists, not every second
            due = sorted(second for second in buckets if second <= last)
        else:
            due = range(self._horizon, last + 1)
        expiry = self._expiry
        for second in due:
            keys = buckets.pop(second, None)
            if keys is None:
                continue
            for key in keys:
                at = expiry.get(key)
                if at is not None and at <= now:  # remembered again later: a later bucket has it
                    del expiry[key]
        self._horizon = last + 1

    def check(self, key_id: str, nonce: str) -> ReplayVerdict:
        """Whether the nonce is new, without remembering it (see :meth:`remember`)."""
        now = self._clock()
        self._purge(now)
        key = (key_id, nonce)
        at = self._expiry.get(key)
        if at is not None:
            if at > now:
                return ReplayVerdict.REPLAY
            del self._expiry[key]  # expired within the current second
        if len(self._expiry) >= self._max_entries:
            return ReplayVerdict.FULL
        return ReplayVerdict.NEW

    def remember(self, key_id: str, nonce: str, created: float) -> None:
        """Record a nonce as used until its signature can no longer pass the time check."""
        key = (key_id, nonce)
        at = created + self._ttl
        now = self._clock()
        if at < now:
            at = now
        previous = self._expiry.get(key)
        if previous is not None and previous > at:
            at = previous
        self._expiry[key] = at
        second = max(math.ceil(at), self._horizon)
        bucket = self._buckets.get(second)
        if bucket is None:
            self._buckets[second] = [key]
        else:
            bucket.append(key)
