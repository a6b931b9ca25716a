"""get_current_time: the current date and time in an IANA time zone."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import BaseModel, ConfigDict, Field

from agent.errors import ToolError
from agent.ports import ToolContext
from agent.tools.base import Tool

__all__ = ["CurrentTimeArgs", "current_time_tool"]


class CurrentTimeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timezone: str = Field(
        default="UTC",
        description="IANA time zone name, e.g. 'Europe/Paris' or 'America/New_York'.",
    )


async def get_current_time(args: CurrentTimeArgs, context: ToolContext) -> dict[str, object]:
    """Return the current time in the zone, or fail with a ToolError naming the bad zone."""
    try:
        zone = ZoneInfo(args.timezone) if args.timezone in _zones() else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        raise ToolError(
            f"Unknown time zone {args.timezone!r}: use an IANA name such as 'Europe/Paris'."
        )
    now = datetime.now(zone)
    return {
        "timezone": args.timezone,
        "iso": now.isoformat(timespec="seconds"),
        "date": now.date().isoformat(),
        "time": now.strftime("%H:%M:%S"),
        "weekday": now.strftime("%A"),
        "utc_offset": now.strftime("%z"),
        "epoch_ms": int(now.timestamp() * 1000),
    }


_ZONES: frozenset[str] = frozenset()


def _zones() -> frozenset[str]:
    """IANA names, loaded once: ZoneInfo alone accepts file paths it should not."""
    global _ZONES
    if not _ZONES:
        _ZONES = frozenset(available_timezones()) | {"UTC"}
    return _ZONES


current_time_tool = Tool(
    name="get_current_time",
    description="Get the current date and time in a time zone (IANA name, default UTC).",
    arguments=CurrentTimeArgs,
    run=get_current_time,
)
