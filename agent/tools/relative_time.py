"""Relative time expressions ("in 3 days", "2 hours ago", "next monday at 9am").

A small, strict parser rather than a dependency: the model writes a handful of forms, and an
expression we do not understand must fail loudly instead of being guessed. Calendar units
(days, weeks, months, years) move the date and keep the wall-clock time, across DST changes;
hours, minutes and seconds are exact elapsed time.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal

__all__ = ["RelativeTimeError", "Shift", "apply_shift", "parse_relative"]

EXAMPLES = (
    '"in 3 days", "2 hours ago", "tomorrow", "next monday", "in 1 week and 2 hours", '
    '"last friday at 9am", "in 90 minutes"'
)

_UNITS: dict[str, tuple[str, float]] = {}
for _names, _unit, _size in (
    (("s", "sec", "secs", "second", "seconds"), "seconds", 1),
    (("m", "min", "mins", "minute", "minutes"), "seconds", 60),
    (("h", "hr", "hrs", "hour", "hours"), "seconds", 3600),
    (("d", "day", "days"), "days", 1),
    (("w", "wk", "wks", "week", "weeks"), "days", 7),
    (("fortnight", "fortnights"), "days", 14),
    (("mo", "mos", "month", "months"), "months", 1),
    (("y", "yr", "yrs", "year", "years"), "months", 12),
):
    for _name in _names:
        _UNITS[_name] = (_unit, _size)

_NUMBERS = {
    word: n
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"a": 1, "an": 1, "couple": 2, "dozen": 12}

_WEEKDAYS = {
    name: i
    for i, names in enumerate(
        (
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        )
    )
    for name in names
}

_FIXED = {
    "now": 0,
    "today": 0,
    "tomorrow": 1,
    "yesterday": -1,
    "day after tomorrow": 2,
    "the day after tomorrow": 2,
    "day before yesterday": -2,
    "the day before yesterday": -2,
}
_WEEKDAY_WORDS: dict[str, Literal["next", "last", "this"]] = {
    "next": "next",
    "last": "last",
    "this": "this",
    "on": "this",
    "coming": "this",
}
_PERIODS = {"day": (0, 1), "week": (0, 7), "fortnight": (0, 14), "month": (1, 0), "year": (12, 0)}
_AT = re.compile(r"^(?P<rest>.*?)\s*\bat\s+(?P<clock>noon|midnight|[\d:.\s]+(?:am|pm)?)$")
_CLOCK = re.compile(r"^(?P<h>\d{1,2})(?:[:.](?P<m>\d{2}))?\s*(?P<ampm>am|pm)?$")
_MAX_SECONDS = 100 * 366 * 86400


class RelativeTimeError(ValueError):
    """The expression is not one this parser understands; the message says what it accepts."""


@dataclass(frozen=True, slots=True)
class Shift:
    """A parsed expression: calendar months and days, exact seconds, weekday, time of day."""

    months: int = 0
    days: int = 0
    seconds: float = 0.0
    weekday: tuple[Literal["next", "last", "this"], int] | None = None
    at: time | None = None


def parse_relative(text: str) -> Shift:
    """Parse an English relative expression; raise RelativeTimeError if it is not understood."""
    cleaned = " ".join(text.lower().replace(",", " , ").split()).strip(" .")
    if not cleaned:
        raise RelativeTimeError(f"The relative expression is empty. Examples: {EXAMPLES}.")
    at: time | None = None
    match = _AT.match(cleaned)
    if match:
        at = _parse_clock(match["clock"].strip())
        cleaned = match["rest"].strip() or "today"
    shift = _parse_core(cleaned, text)
    return replace(shift, at=at) if at is not None else shift


def apply_shift(now: datetime, shift: Shift) -> datetime:
    """Return `now` (an aware datetime) moved by `shift`, in now's time zone."""
    zone = now.tzinfo
    day = now.date()
    if shift.weekday is not None:
        day += timedelta(days=_weekday_delta(day, *shift.weekday))
    try:
        day = _add_months(day, shift.months) + timedelta(days=shift.days)
        clock = shift.at or now.time().replace(microsecond=0)
        moved = datetime.combine(day, clock, tzinfo=zone)
        return (moved.astimezone(UTC) + timedelta(seconds=shift.seconds)).astimezone(zone)
    except (OverflowError, ValueError):
        raise RelativeTimeError("The expression moves the date outside years 1-9999.") from None


def _parse_core(cleaned: str, original: str) -> Shift:
    if cleaned in _FIXED:
        return Shift(days=_FIXED[cleaned])
    words = cleaned.split()
    if len(words) == 2 and words[0] in ("next", "last", "this") and words[1] in _PERIODS:
        sign = {"next": 1, "last": -1, "this": 0}[words[0]]
        months, days = _PERIODS[words[1]]
        return Shift(months=sign * months, days=sign * days)
    if len(words) in (1, 2) and words[-1] in _WEEKDAYS:
        which = _WEEKDAY_WORDS.get(words[0] if len(words) == 2 else "this")
        if which is not None:
            return Shift(weekday=(which, _WEEKDAYS[words[-1]]))
    sign, body = _direction(cleaned)
    if body is None:
        raise RelativeTimeError(f"Cannot understand {original!r}. Examples: {EXAMPLES}.")
    months, days, seconds = _parse_durations(body, original)
    return Shift(months=sign * months, days=sign * days, seconds=sign * seconds)


def _direction(cleaned: str) -> tuple[int, str | None]:
    """Split "in X" / "X from now" / "X ago" / "+X" / "-X" into (sign, X)."""
    for prefix, sign in (("in ", 1), ("+", 1), ("-", -1), ("after ", 1)):
        if cleaned.startswith(prefix):
            return sign, cleaned[len(prefix) :].strip()
    for suffix, sign in ((" from now", 1), (" later", 1), (" ago", -1), (" before now", -1)):
        if cleaned.endswith(suffix):
            return sign, cleaned[: -len(suffix)].strip()
    return 1, None


def _parse_durations(body: str, original: str) -> tuple[int, int, float]:
    """Sum "1 week and 2 hours", "3d4h", "an hour and a half" into (months, days, seconds)."""
    if not re.fullmatch(r"[a-z0-9., ]+", body):
        raise RelativeTimeError(f"Cannot understand {original!r}. Examples: {EXAMPLES}.")
    tokens = [t for t in re.findall(r"\d+(?:\.\d+)?|[a-z]+|,", body) if t not in (",", "and")]
    months, days, seconds = 0.0, 0.0, 0.0
    last: tuple[str, float] | None = None
    i = 0
    while i < len(tokens):
        if tokens[i : i + 2] == ["a", "half"] and last is not None:
            amount, (unit, size), i = 0.5, last, i + 2
        else:
            amount, i = _amount(tokens, i, original)
            if i >= len(tokens) or tokens[i] not in _UNITS:
                found = tokens[i] if i < len(tokens) else "nothing"
                raise RelativeTimeError(
                    f"Cannot understand {original!r}: expected a unit (minutes, hours, days, "
                    f"weeks, months, years) but found {found!r}. Examples: {EXAMPLES}."
                )
            unit, size = _UNITS[tokens[i]]
            i += 1
        last = (unit, size)
        if unit == "seconds":
            seconds += amount * size
        elif unit == "days":
            whole = int(amount * size)
            days += whole
            seconds += (amount * size - whole) * 86400
        else:
            months += amount * size
    if last is None:
        raise RelativeTimeError(f"Cannot understand {original!r}. Examples: {EXAMPLES}.")
    if months != int(months):
        raise RelativeTimeError(f"{original!r}: use whole months and years, or days.")
    if abs(months) * 31 * 86400 + abs(days) * 86400 + abs(seconds) > _MAX_SECONDS:
        raise RelativeTimeError(f"{original!r} is more than 100 years away.")
    return int(months), int(days), seconds


def _amount(tokens: list[str], i: int, original: str) -> tuple[float, int]:
    token = tokens[i]
    if token == "half":
        skip = 2 if i + 1 < len(tokens) and tokens[i + 1] in ("a", "an") else 1
        return 0.5, i + skip
    if token == "a" and i + 1 < len(tokens) and tokens[i + 1] in ("couple", "dozen"):
        token, i = tokens[i + 1], i + 1
    if token in _NUMBERS:
        skip = 2 if i + 1 < len(tokens) and tokens[i + 1] == "of" else 1
        return float(_NUMBERS[token]), i + skip
    try:
        return float(token), i + 1
    except ValueError:
        raise RelativeTimeError(
            f"Cannot understand {original!r}: expected a number but found {token!r}. "
            f"Examples: {EXAMPLES}."
        ) from None


def _parse_clock(text: str) -> time:
    if text in ("noon", "midnight"):
        return time(12 if text == "noon" else 0)
    match = _CLOCK.match(text)
    if not match:
        raise RelativeTimeError(f"Cannot read the time of day {text!r}: use 9am, 14:30 or noon.")
    hour, minute = int(match["h"]), int(match["m"] or 0)
    if match["ampm"]:
        if not 1 <= hour <= 12:
            raise RelativeTimeError(f"{text!r}: with am/pm the hour must be 1-12.")
        hour = hour % 12 + (12 if match["ampm"] == "pm" else 0)
    if hour > 23 or minute > 59:
        raise RelativeTimeError(f"{text!r} is not a valid time of day.")
    return time(hour, minute)


def _weekday_delta(today: date, which: str, weekday: int) -> int:
    """next: strictly after today; last: strictly before; this: today or the coming one."""
    ahead = (weekday - today.weekday()) % 7
    if which == "next":
        return ahead or 7
    if which == "last":
        return -((today.weekday() - weekday) % 7 or 7)
    return ahead


def _add_months(day: date, months: int) -> date:
    """Move by whole months, clamping the day (Jan 31 + 1 month = Feb 28/29)."""
    if not months:
        return day
    year, month0 = divmod(day.month - 1 + months, 12)
    year += day.year
    last = calendar.monthrange(year, month0 + 1)[1]
    return date(year, month0 + 1, min(day.day, last))
