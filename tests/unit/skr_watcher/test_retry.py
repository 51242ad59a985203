"""What KCP's answers mean for an event, and the backoff between tries."""

from __future__ import annotations

import datetime
import random

import pytest

from kyma_wire.http_client import HttpTimeoutError, HttpTransportError
from skr_watcher.retry import (
    MAX_RETRY_AFTER,
    RetryBackoff,
    Verdict,
    classify_error,
    classify_response,
    parse_retry_after,
)

NOW = datetime.datetime(2026, 11, 21, 10, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("status", "verdict", "reason"),
    [
        (200, Verdict.DELIVERED, ""),
        (202, Verdict.DELIVERED, ""),
        (400, Verdict.DROP, "http-400"),
        (401, Verdict.DROP, "http-401"),
        (404, Verdict.DROP, "http-404"),
        (413, Verdict.DROP, "http-413"),
        (408, Verdict.RETRY, "http-408"),
        (429, Verdict.RETRY, "http-429"),
        (500, Verdict.RETRY, "http-5xx"),
        (502, Verdict.RETRY, "http-5xx"),
        (503, Verdict.RETRY, "http-503"),
        (302, Verdict.RETRY, "unexpected-status"),
    ],
)
def test_status_classification(status: int, verdict: Verdict, reason: str) -> None:
    result = classify_response(status, {}, NOW)
    assert (result.verdict, result.reason, result.status) == (verdict, reason, status)


def test_retry_after_seconds_and_date_are_honoured() -> None:
    assert classify_response(429, {"retry-after": "7"}, NOW).retry_after == 7.0
    date = "Sat, 21 Nov 2026 10:00:30 GMT"
    assert classify_response(503, {"retry-after": date}, NOW).retry_after == 30.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("soon", None),
        ("-1", None),
        ("99999", MAX_RETRY_AFTER),
        ("Sat, 21 Nov 2026 09:00:00 GMT", 0.0),
    ],
)
def test_retry_after_edge_cases(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_errors() -> None:
    assert classify_error(HttpTransportError("ConnectionRefusedError: refused")).reason == "network"
    assert classify_error(HttpTimeoutError("timeout")).reason == "timeout"
    assert classify_error(TimeoutError()).reason == "timeout"
    assert classify_error(ConnectionResetError()).reason == "network"
    assert classify_error(ValueError("bad key")).reason == "request-setup"
    assert all(classify_error(e).verdict is Verdict.RETRY for e in (ValueError(), OSError()))


def test_backoff_grows_exponentially_with_jitter_and_cap() -> None:
    backoff = RetryBackoff(0.2, 30.0, random.Random(7))
    for attempt in range(1, 20):
        ceiling = min(30.0, 0.2 * 2 ** (attempt - 1))
        assert backoff.ceiling(attempt) == ceiling
        delay = backoff.delay(attempt)
        assert ceiling / 2 <= delay <= ceiling
    assert backoff.ceiling(10_000) == 30.0


def test_backoff_jitter_spreads_senders() -> None:
    backoff = RetryBackoff(1.0, 60.0, random.Random(1))
    delays = {round(backoff.delay(5), 6) for _ in range(50)}
    assert len(delays) > 40


def test_retry_after_is_a_floor() -> None:
    backoff = RetryBackoff(0.1, 1.0, random.Random(0))
    assert backoff.delay(1, retry_after=12.0) == 12.0
    assert backoff.delay(30, retry_after=0.01) >= 0.5


def test_invalid_backoff() -> None:
    with pytest.raises(ValueError):
        RetryBackoff(0, 1)
    with pytest.raises(ValueError):
        RetryBackoff(2, 1)
