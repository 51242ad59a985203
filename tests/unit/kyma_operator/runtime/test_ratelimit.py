"""Rate limiters: client-go's delays, on a fake clock."""

from __future__ import annotations

import pytest

from kyma_operator.runtime import (
    BucketRateLimiter,
    FakeClock,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


def test_exponential_doubles_per_item_and_caps() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1.0)
    delays = [limiter.when("a") for _ in range(10)]
    assert delays[:5] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert delays[-1] == 1.0
    assert max(delays) == 1.0
    assert limiter.num_requeues("a") == 10
    assert limiter.when("b") == pytest.approx(0.005)  # independent per item


def test_exponential_forget_resets_and_huge_counts_do_not_overflow() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(2000):
        last = limiter.when("a")
    assert last == 1000.0
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_bucket_allows_burst_then_spaces_by_qps_and_refills() -> None:
    clock = FakeClock()
    limiter = BucketRateLimiter(qps=10, burst=3, clock=clock)
    assert [limiter.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.when("x") == pytest.approx(0.1)
    assert limiter.when("y") == pytest.approx(0.2)
    clock.advance(0.2)  # the two reserved tokens are now paid for
    assert limiter.when("z") == pytest.approx(0.1)
    clock.advance(10)  # refills up to burst only
    assert [limiter.when(i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.when("w") == pytest.approx(0.1)


def test_max_of_takes_longest_and_forgets_everywhere() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(1.0, 100.0), BucketRateLimiter(1, 1, clock=clock)
    )
    assert limiter.when("a") == 1.0  # exponential 1.0 vs bucket 0
    assert limiter.when("a") == 2.0  # exponential 2.0 vs bucket 1.0
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_default_controller_limiter_values() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock)
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.when("a") == pytest.approx(0.01)
    # 100 distinct failing keys drain the burst; the next one waits for the 10 qps bucket.
    for i in range(98):
        limiter.when(i)
    assert limiter.when("late") == pytest.approx(0.1)


@pytest.mark.parametrize("kwargs", [{"base": 0}, {"max_delay": -1}])
def test_exponential_rejects_bad_config(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter(**kwargs)


def test_bucket_rejects_bad_config() -> None:
    with pytest.raises(ValueError):
        BucketRateLimiter(qps=0)
    with pytest.raises(ValueError):
        BucketRateLimiter(burst=0)
