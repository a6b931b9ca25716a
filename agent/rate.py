"""TokenBucket: the one rate limiter (inbound WebSocket frames, web searches, run starts).

A bucket holds up to `burst` tokens and gains `per_s` a second; each request takes one.
The clock is injected, so a test moves time instead of waiting for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TokenBucket", "TokenBuckets"]


class TokenBucket:
    """`burst` requests at once, refilled continuously at `per_s` a second; starts full."""

    __slots__ = ("_at", "_burst", "_clock", "_per_s", "_tokens")

    def __init__(
        self, per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._per_s = per_s
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> float:
        """Take one token: return 0 when taken, else the seconds until one is available
        (nothing is taken then)."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_s)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self._per_s


class TokenBuckets:
    """One TokenBucket per key (a tenant), each made full on the key's first request."""

    def __init__(
        self, per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._per_s = per_s
        self._burst = burst
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def take(self, key: str) -> float:
        """Take one of `key`'s tokens; see TokenBucket.take."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self._per_s, self._burst, self._clock)
        return bucket.take()
