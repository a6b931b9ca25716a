"""The wall clock as every stored timestamp reads it (whole milliseconds since the epoch), and
the date the model is told."""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["now_ms", "today"]


def now_ms() -> int:
    """Milliseconds since the Unix epoch, now."""
    return time.time_ns() // 1_000_000


def today() -> str:
    """Today's date in UTC, as the system prompt tells it to the model: in words ("Saturday,
    28 November 2026"), not as the ISO date a tool's result carries, so that an answer
    built from a result is not built from the prompt instead (docs/models.md)."""
    return datetime.now(UTC).strftime("%A, %-d %B %Y")
