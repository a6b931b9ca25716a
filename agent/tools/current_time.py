"""get_current_time: the current (or a relative) date and time in one or more IANA zones.

`{"timezone": "Europe/Paris"}` answers with one flat object, as it always has. Several
zones (`timezones`) answer with `{"times": [...]}`, one object per zone, in the order asked;
a zone it does not know is `{"timezone": name, "error": ...}` there, and only when it knows
none is the call an error (Qwen2.5-0.5B listed ten zones, "America/Argentina" among them, and
lost the one it was asked for).
`relative` moves the instant ("in 3 days", "next monday at 9am"): calendar arithmetic
happens in the first zone's wall clock, and every zone then shows that same instant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.errors import ToolError
from agent.ports import ToolContext
from agent.tools.base import Tool
from agent.tools.python import make_tool
from agent.tools.relative_time import RelativeTimeError, apply_shift, parse_relative

__all__ = ["CurrentTimeArgs", "current_time_tool", "make_current_time_tool"]

MAX_ZONES = 10


class CurrentTimeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timezone: str = Field(
        default="UTC",
        description="The IANA time zone name of the place asked about (Area/City).",
    )
    timezones: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ZONES,
        description=(
            "Only to ask for several places in one call: their IANA zone names. The answer "
            "is then {'times': [...]}."
        ),
    )
    relative: str | None = Field(
        default=None,
        max_length=200,
        description=(
            "Only when the person asks about another moment than now: that moment in words, "
            "relative to now (a number of days, weeks or hours before or after, tomorrow, "
            "next monday at 9am). The answer is that moment."
        ),
    )

    @field_validator("timezones", mode="before")
    @classmethod
    def _once_each(cls, value: object) -> object:
        """A zone listed again is asked once: a small model repeats the list's last zone until
        its reply is cut, and the call would be refused as too long."""
        return (
            list(dict.fromkeys(value))
            if isinstance(value, list) and all(isinstance(v, str) for v in value)
            else value
        )


def make_current_time_tool(clock: Callable[[], datetime] | None = None) -> Tool:
    """Build the tool; `clock` returns the current aware datetime (tests pin it)."""
    now_utc = clock or (lambda: datetime.now(UTC))

    async def get_current_time(args: CurrentTimeArgs, context: ToolContext) -> object:
        found: dict[str, ZoneInfo | ToolError] = {}
        for asked in _requested_zones(args):
            try:
                name = await _iana_name(asked)
                found.setdefault(name, await _zone(name))
            except ToolError as exc:
                found.setdefault(asked, exc)
        zones = [(name, zone) for name, zone in found.items() if not isinstance(zone, ToolError)]
        if not zones:  # it knows none of them: the first error says why
            raise next(z for z in found.values() if isinstance(z, ToolError))
        reference = now_utc().astimezone(zones[0][1])
        moment = reference
        if args.relative is not None:
            try:
                moment = apply_shift(reference, parse_relative(args.relative))
            except RelativeTimeError as exc:
                raise ToolError(str(exc)) from None
        described = [_describe(name, moment.astimezone(zone)) for name, zone in zones]
        if args.relative is not None:
            for item, (_, zone) in zip(described, zones, strict=True):
                item["relative"] = args.relative
                item["reference_iso"] = reference.astimezone(zone).isoformat(timespec="seconds")
        if args.timezones is None:
            return described[0]
        shown = iter(described)
        return {
            "times": [
                next(shown)
                if isinstance(zone, ZoneInfo)
                else {"timezone": name, "error": str(zone)}
                for name, zone in found.items()
            ]
        }

    # The same mechanism as a Python tool of a config module (agent/tools/python.py).
    return make_tool(
        get_current_time,
        description=(
            "Get the current date and time in one or more time zones (IANA names, default "
            "UTC), or the date and time of a moment relative to now."
        ),
    )


def _requested_zones(args: CurrentTimeArgs) -> list[str]:
    """`timezones` when given (with an explicit `timezone` first), else `timezone`."""
    if args.timezones is None:
        return [args.timezone]
    names = list(args.timezones)
    if "timezone" in args.model_fields_set:
        names.insert(0, args.timezone)
    return list(dict.fromkeys(names))


async def _iana_name(name: str) -> str:
    """`name` as an IANA zone name: itself, or the one zone whose city it names ("Tokyo",
    "new york": a person, and a model, says the city; the database says `Asia/Tokyo`), also
    under the wrong area ("Asia/London": Qwen2.5-0.5B wrote it, and then copied the example
    of the error into its next call). The result names the zone it read."""
    zones = await _zones()
    if name in zones:
        return name
    wanted = "_".join(name.split()).lower()
    city = wanted.rsplit("/", 1)[-1]
    matches = sorted(
        z for z in zones if z.lower() == wanted or z.lower().rsplit("/", 1)[-1] == city
    )
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ToolError(f"Time zone {name!r} is ambiguous: use one of {', '.join(matches)}.")
    return name  # refused by _zone, with the usual message


async def _zone(name: str) -> ZoneInfo:
    """The zone named `name`, its file read once and off the event loop."""
    zone = _LOADED.get(name)
    if zone is not None:
        return zone
    try:
        if name in await _zones():
            zone = _LOADED[name] = await asyncio.to_thread(ZoneInfo, name)
            return zone
    except (ZoneInfoNotFoundError, ValueError):
        pass
    # No example zone: a small model copies it into its next call as the zone it wants.
    raise ToolError(f"Unknown time zone {name!r}: give an IANA name (Area/City) or a city.")


def _describe(name: str, moment: datetime) -> dict[str, object]:
    return {
        "timezone": name,
        "iso": moment.isoformat(timespec="seconds"),
        "date": moment.date().isoformat(),
        "time": moment.strftime("%H:%M:%S"),
        "weekday": moment.strftime("%A"),
        "utc_offset": moment.strftime("%z"),
        "epoch_ms": int(moment.timestamp() * 1000),
    }


_ZONES: frozenset[str] = frozenset()
_LOADED: dict[str, ZoneInfo] = {}  # at most one per IANA name


async def _zones() -> frozenset[str]:
    """IANA names, loaded once: ZoneInfo alone accepts file paths it should not. Listing them
    walks the time zone database (tens of milliseconds), so not on the event loop."""
    global _ZONES
    if not _ZONES:
        _ZONES = frozenset(await asyncio.to_thread(available_timezones)) | {"UTC"}
    return _ZONES


current_time_tool = make_current_time_tool()
