"""Summaries of repeated measurements: every figure is a median of repetitions, with min/max."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["percentile", "summarize"]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return float(data[low] + (data[high] - data[low]) * (pos - low))


def summarize(reps: Iterable[float | None], digits: int = 3) -> dict[str, Any]:
    """{median, min, max, reps} over the repetitions that produced a value."""
    values = [float(v) for v in reps if v is not None and not math.isnan(v)]
    if not values:
        return {"median": None, "min": None, "max": None, "reps": []}
    return {
        "median": round(percentile(values, 50), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "reps": [round(v, digits) for v in values],
    }
