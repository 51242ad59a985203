"""Retry policy for posts to KCP: what a response means, and how long to wait before the next try.

Upstream tries three times within six seconds and then loses the event. Here an event is retried
until it is delivered, superseded by a newer one, or definitively rejected: network errors, 5xx,
408, 429 and 503 are retried with exponential backoff, equal jitter and a cap, honouring
``Retry-After``; other 4xx answers mean the event can never be accepted and it is dropped, except
a 401 that carries ``Retry-After``: the listener refuses a signature created before it took over the
runtime's events (a leader failover or shard move; a replay of a request the previous holder
accepted must not pass), and the next attempt is signed anew, so it is retried. Pure
functions and an injectable random source keep this testable without sockets or sleeps.
"""

from __future__ import annotations

import datetime
import email.utils
import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from kyma_wire.http_client import HttpTimeoutError, HttpTransportError

MAX_RETRY_AFTER = 300.0
"""Upper bound for a server-requested pause, so one bad header cannot park a sender for hours."""

_RETRYABLE_4XX = frozenset({408, 425, 429})


class Verdict(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class SendResult:
    verdict: Verdict
    reason: str = ""
    """Metric label for failures: ``network``, ``timeout``, ``http-503``, ``http-5xx``, ..."""
    retry_after: float | None = None
    status: int | None = None


def classify_response(
    status: int, headers: Mapping[str, str], now: datetime.datetime | None = None
) -> SendResult:
    """Map an HTTP answer from KCP to delivered / retry / drop."""
    if 200 <= status < 300:
        return SendResult(Verdict.DELIVERED, status=status)
    if status in _RETRYABLE_4XX or status == 503 or (status == 401 and headers.get("retry-after")):
        retry_after = parse_retry_after(headers.get("retry-after"), now)
        return SendResult(Verdict.RETRY, f"http-{status}", retry_after, status)
    if status >= 500:
        return SendResult(Verdict.RETRY, "http-5xx", status=status)
    if 400 <= status < 500:
        return SendResult(Verdict.DROP, f"http-{status}", status=status)
    return SendResult(Verdict.RETRY, "unexpected-status", status=status)


def classify_error(error: Exception) -> SendResult:
    """Map an exception raised while posting. Only transport problems are retried."""
    if isinstance(error, HttpTimeoutError | TimeoutError):
        return SendResult(Verdict.RETRY, "timeout")
    if isinstance(error, HttpTransportError | OSError):
        return SendResult(Verdict.RETRY, "network")
    return SendResult(Verdict.RETRY, "request-setup")


def parse_retry_after(value: str | None, now: datetime.datetime | None = None) -> float | None:
    """Seconds from ``Retry-After`` (delta-seconds or HTTP-date), capped; None if absent/invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    reference = now or datetime.datetime.now(datetime.UTC)
    return min(max(0.0, (when - reference).total_seconds()), MAX_RETRY_AFTER)


class RetryBackoff:
    """Exponential backoff with equal jitter: attempt n waits in [d/2, d], d = min(cap, base * 2^(n-1))."""

    def __init__(self, base: float, cap: float, rng: random.Random | None = None) -> None:
        if base <= 0 or cap < base:
            raise ValueError("need 0 < base <= cap")
        self._base = base
        self._cap = cap
        self._rng = rng or random.Random()

    def ceiling(self, attempt: int) -> float:
        exponent = min(max(attempt, 1) - 1, 62)
        return min(self._cap, self._base * (2.0**exponent))

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Wait before retry number ``attempt`` (1 after the first failure); at least ``retry_after``."""
        ceiling = self.ceiling(attempt)
        jittered = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        return max(jittered, retry_after or 0.0)
