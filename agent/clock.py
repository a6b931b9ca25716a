"""The wall clock as every stored timestamp reads it: whole milliseconds since the epoch."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the Unix epoch, now."""
    return time.time_ns() // 1_000_000
