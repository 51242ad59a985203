"""Jittered exponential backoff for reconnect loops (watches, leader election retries).

Separate from the work queue's rate limiters: those delay *keys*, this delays one loop retrying one
connection. Full jitter spreads reconnecting clients so a restarted API server is not stampeded.
"""

from __future__ import annotations

import random


class ReconnectBackoff:
    """Delays ``initial * factor**n`` capped at ``maximum``, each times a random factor in [1-j/2, 1+j/2]."""

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
    ) -> None:
        if initial <= 0 or maximum < initial or factor < 1 or not 0 <= jitter <= 1:
            raise ValueError("need 0 < initial <= maximum, factor >= 1, 0 <= jitter <= 1")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._attempt = 0

    def next(self) -> float:
        """The delay before the next attempt (grows with each call until ``reset``)."""
        base = min(self.maximum, self.initial * self.factor ** min(self._attempt, 64))
        self._attempt += 1
        spread = 1.0 + self.jitter * (self._rng.random() - 0.5)
        return min(self.maximum, base * spread)

    def reset(self) -> None:
        self._attempt = 0
