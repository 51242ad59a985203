"""How long a failing key waits before it is retried (client-go ``workqueue`` rate limiters).

The default for controllers is the maximum of a per-key exponential backoff (5 ms doubling up to
1000 s, reset by ``forget``) and a process-wide token bucket (10 qps, burst 100) that bounds the
retry rate when many keys fail at once.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from kyma_operator.runtime.clock import Clock, RealClock


class RateLimiter(Protocol):
    """Decides the delay before a key is re-added after a failure."""

    def when(self, item: Hashable) -> float:
        """The delay in seconds for the next retry of ``item`` (records one more failure)."""
        ...

    def forget(self, item: Hashable) -> None:
        """Stop tracking ``item`` (it succeeded)."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """How many failures of ``item`` are being tracked."""
        ...


class ItemExponentialFailureRateLimiter:
    """``base * 2**failures`` per item, capped at ``max_delay``."""

    def __init__(self, base: float = 0.005, max_delay: float = 1000.0) -> None:
        if base <= 0 or max_delay <= 0:
            raise ValueError("base and max_delay must be positive")
        self.base = base
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        if exponent >= 1024:  # 2**1024 overflows a float; long past the cap anyway
            return self.max_delay
        return min(self.base * 2.0**exponent, self.max_delay)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """A token bucket shared by all items: ``qps`` tokens per second, at most ``burst`` saved.

    Like ``golang.org/x/time/rate``'s ``Reserve``: every call takes a token, possibly one that
    only becomes available in the future, and the delay is the wait until then.
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, *, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock or RealClock()
        self._tokens = float(burst)
        self._last = self._clock.now()

    def when(self, item: Hashable) -> float:
        now = self._clock.now()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest delay of several limiters (each one records the failure)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("need at least one rate limiter")
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(clock: Clock | None = None) -> MaxOfRateLimiter:
    """controller-runtime's default: exponential 5 ms..1000 s per item, max-ed with 10 qps/100 burst."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(10.0, 100, clock=clock),
    )


def operator_rate_limiter(
    base_delay: float, max_delay: float, *, clock: Clock | None = None, qps: float = 1000.0, burst: int = 2000
) -> MaxOfRateLimiter:
    """The operator's controllers: per-item backoff ``base_delay``..``max_delay`` (upstream's flags),
    max-ed with a token bucket that only guards against storms (``qps``/``burst``)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base_delay, max_delay),
        BucketRateLimiter(qps, burst, clock=clock),
    )
