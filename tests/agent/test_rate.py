"""TokenBucket: the one rate limiter, driven by a clock the test moves."""

from __future__ import annotations

import pytest

from agent.rate import TokenBucket, TokenBuckets


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_full_bucket_gives_its_burst_then_says_how_long_to_wait() -> None:
    clock = Clock()
    bucket = TokenBucket(per_s=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)  # one token comes back in 1/2 s
    clock.now += 0.25
    assert bucket.take() == pytest.approx(0.25)  # refused takes nothing
    clock.now += 0.25
    assert bucket.take() == 0.0


def test_a_bucket_refills_continuously_but_never_beyond_its_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(per_s=1.0, burst=2, clock=clock)
    assert bucket.take() == 0.0 and bucket.take() == 0.0
    clock.now += 3600.0
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, pytest.approx(1.0)]


def test_each_key_has_its_own_bucket_full_at_its_first_request() -> None:
    clock = Clock()
    buckets = TokenBuckets(per_s=1 / 60, burst=1, clock=clock)
    assert buckets.take("acme") == 0.0
    assert buckets.take("acme") == pytest.approx(60.0)
    clock.now += 30.0
    assert buckets.take("globex") == 0.0  # not slowed by acme's requests
    assert buckets.take("acme") == pytest.approx(30.0)
