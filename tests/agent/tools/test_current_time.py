"""get_current_time: one zone as before, several zones, relative expressions, and the parser."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, time
from zoneinfo import ZoneInfo

import pytest

from agent.errors import ModelBehaviorError, ToolError
from agent.tools import current_time
from agent.tools.current_time import current_time_tool, make_current_time_tool
from agent.tools.relative_time import RelativeTimeError, Shift, apply_shift, parse_relative
from tests.agent.tools.conftest import call

# Saturday 2025-03-29 11:00 UTC, the eve of the EU switch to summer time.
NOW = datetime(2025, 3, 29, 11, 0, 0, tzinfo=UTC)
PARIS = ZoneInfo("Europe/Paris")
tool = make_current_time_tool(clock=lambda: NOW)


async def test_single_zone_keeps_the_original_shape() -> None:
    result = await call(tool, {"timezone": "Europe/Paris"})
    assert result == {
        "timezone": "Europe/Paris",
        "iso": "2025-03-29T12:00:00+01:00",
        "date": "2025-03-29",
        "time": "12:00:00",
        "weekday": "Saturday",
        "utc_offset": "+0100",
        "epoch_ms": int(NOW.timestamp() * 1000),
    }


async def test_default_tool_still_answers_utc_now() -> None:
    before = datetime.now(UTC)
    result = await call(current_time_tool, {})
    assert result["timezone"] == "UTC" and result["utc_offset"] == "+0000"
    assert abs(result["epoch_ms"] - before.timestamp() * 1000) < 5000


async def test_several_zones_answer_the_same_instant_in_order() -> None:
    result = await call(tool, {"timezones": ["Asia/Tokyo", "America/New_York", "UTC"]})
    times = result["times"]
    assert [t["timezone"] for t in times] == ["Asia/Tokyo", "America/New_York", "UTC"]
    assert [t["time"] for t in times] == ["20:00:00", "07:00:00", "11:00:00"]
    assert len({t["epoch_ms"] for t in times}) == 1


async def test_explicit_timezone_comes_first_with_timezones() -> None:
    result = await call(tool, {"timezone": "Europe/Paris", "timezones": ["UTC", "Europe/Paris"]})
    assert [t["timezone"] for t in result["times"]] == ["Europe/Paris", "UTC"]


async def test_unknown_zone_is_a_tool_error_naming_it() -> None:
    with pytest.raises(ToolError, match="Mars/Olympus"):
        await call(tool, {"timezones": ["Mars/Olympus", "Venus/Maxwell"]})
    with pytest.raises(ToolError, match="etc/passwd"):
        await call(tool, {"timezone": "../../etc/passwd"})


async def test_an_unknown_zone_among_several_is_named_and_the_others_answer() -> None:
    """Qwen2.5-0.5B asked for London beside nine more zones, "America/Argentina" among
    them: the call failed whole, and it answered with a time it made up."""
    result = await call(tool, {"timezone": "London", "timezones": ["Mars/Olympus", "Tokyo"]})
    london, mars, tokyo = result["times"]
    assert (london["timezone"], london["time"]) == ("Europe/London", "11:00:00")
    assert mars == {
        "timezone": "Mars/Olympus",
        "error": "Unknown time zone 'Mars/Olympus': give an IANA name (Area/City) or a city.",
    }
    assert (tokyo["timezone"], tokyo["time"]) == ("Asia/Tokyo", "20:00:00")


async def test_a_zone_listed_again_is_asked_once() -> None:
    """A small model repeats the list's last zone until its reply is cut: more than the
    list's limit of names, but few zones."""
    result = await call(tool, {"timezones": ["UTC", *["Europe/Oslo"] * 40]})
    assert [t["timezone"] for t in result["times"]] == ["UTC", "Europe/Oslo"]


async def test_a_city_names_its_zone_when_only_one_zone_is_that_city() -> None:
    """People, and models, say "Tokyo" or "new york": the zone is the one of that city."""
    assert (await call(tool, {"timezone": "Tokyo"}))["timezone"] == "Asia/Tokyo"
    assert (await call(tool, {"timezone": "new york"}))["timezone"] == "America/New_York"
    both = await call(tool, {"timezones": ["London", "Europe/London", "Paris"]})
    assert [t["timezone"] for t in both["times"]] == ["Europe/London", "Europe/Paris"]
    with pytest.raises(ToolError, match="ambiguous: use one of America/Kentucky/Louisville"):
        await call(tool, {"timezone": "Louisville"})


async def test_a_city_under_the_wrong_area_is_read_as_that_city() -> None:
    """Qwen2.5-0.5B asked for "Asia/London", then copied the error's example zone into its
    next call: the city is read, and an error names no zone to copy."""
    assert (await call(tool, {"timezone": "Asia/London"}))["timezone"] == "Europe/London"
    with pytest.raises(ToolError) as failed:
        await call(tool, {"timezone": "Asia/Atlantis"})
    assert "/" not in str(failed.value).replace("'Asia/Atlantis'", "").replace("Area/City", "")


async def test_relative_expression_moves_the_instant() -> None:
    result = await call(tool, {"timezone": "Europe/Paris", "relative": "in 3 days"})
    # Calendar days keep the wall clock across the DST change of March 30.
    assert result["iso"] == "2025-04-01T12:00:00+02:00"
    assert result["relative"] == "in 3 days"
    assert result["reference_iso"] == "2025-03-29T12:00:00+01:00"


async def test_relative_with_several_zones_uses_the_first_zone_calendar() -> None:
    result = await call(
        tool, {"timezones": ["Europe/Paris", "Asia/Tokyo"], "relative": "tomorrow at 9am"}
    )
    paris, tokyo = result["times"]
    assert paris["iso"] == "2025-03-30T09:00:00+02:00"
    assert tokyo["iso"] == "2025-03-30T16:00:00+09:00"


async def test_unparseable_relative_is_a_tool_error_with_examples() -> None:
    with pytest.raises(ToolError, match="in 3 days"):
        await call(tool, {"relative": "when pigs fly"})


async def test_arguments_are_strict() -> None:
    with pytest.raises(ModelBehaviorError, match="zone"):
        await call(tool, {"zone": "UTC"})
    with pytest.raises(ModelBehaviorError):
        await call(tool, {"timezones": []})


# -- the parser ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", "2025-03-29T12:00:00+01:00"),
        ("in 3 days", "2025-04-01T12:00:00+02:00"),
        ("2 hours ago", "2025-03-29T10:00:00+01:00"),
        ("tomorrow", "2025-03-30T12:00:00+02:00"),
        ("yesterday", "2025-03-28T12:00:00+01:00"),
        ("the day after tomorrow", "2025-03-31T12:00:00+02:00"),
        ("next monday", "2025-03-31T12:00:00+02:00"),
        ("next saturday", "2025-04-05T12:00:00+02:00"),
        ("last saturday", "2025-03-22T12:00:00+01:00"),
        ("saturday", "2025-03-29T12:00:00+01:00"),
        ("last friday at 9am", "2025-03-28T09:00:00+01:00"),
        ("in 1 week and 2 hours", "2025-04-05T14:00:00+02:00"),
        ("in 2 weeks, 3 days and 4 hours", "2025-04-15T16:00:00+02:00"),
        ("1 hour 30 minutes ago", "2025-03-29T10:30:00+01:00"),
        ("an hour and a half from now", "2025-03-29T13:30:00+01:00"),
        ("half an hour ago", "2025-03-29T11:30:00+01:00"),
        ("in a couple of days", "2025-03-31T12:00:00+02:00"),
        ("3d4h ago", "2025-03-26T08:00:00+01:00"),
        ("+90 minutes", "2025-03-29T13:30:00+01:00"),
        ("-1 day", "2025-03-28T12:00:00+01:00"),
        ("in 1.5 days", "2025-03-31T00:00:00+02:00"),
        ("next week", "2025-04-05T12:00:00+02:00"),
        ("next month", "2025-04-29T12:00:00+02:00"),
        ("last year", "2024-03-29T12:00:00+01:00"),
        ("in 2 years", "2027-03-29T12:00:00+02:00"),
        ("tomorrow at noon", "2025-03-30T12:00:00+02:00"),
        ("at 14:30", "2025-03-29T14:30:00+01:00"),
        ("In 24 Hours.", "2025-03-30T13:00:00+02:00"),  # exact hours cross the DST change
        ("in twelve minutes", "2025-03-29T12:12:00+01:00"),
    ],
)
def test_parse_and_apply(text: str, expected: str) -> None:
    moment = apply_shift(NOW.astimezone(PARIS), parse_relative(text))
    assert moment.isoformat() == expected


def test_month_end_is_clamped() -> None:
    jan31 = datetime(2024, 1, 31, 8, 0, tzinfo=UTC)
    assert apply_shift(jan31, parse_relative("in 1 month")).date().isoformat() == "2024-02-29"


def test_parse_result_structure() -> None:
    assert parse_relative("next monday at 9:15pm") == Shift(weekday=("next", 0), at=time(21, 15))
    assert parse_relative("in 1 week and 2 hours") == Shift(days=7, seconds=7200)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "soon",
        "3 days",
        "in 3 bananas",
        "in -3 days",
        "in days",
        "in 1.5 months",
        "tomorrow at 25:00",
        "at 13pm",
        "in 200 years",
        "next blursday",
    ],
)
def test_parser_rejects_what_it_does_not_understand(text: str) -> None:
    with pytest.raises(RelativeTimeError):
        parse_relative(text)


def test_date_out_of_range_is_an_error_not_a_crash() -> None:
    late = datetime(9999, 12, 1, tzinfo=UTC)
    with pytest.raises(RelativeTimeError, match="outside"):
        apply_shift(late, parse_relative("in 2 months"))


async def test_the_time_zone_database_is_read_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listing the zones walks a directory tree, and a zone's first use reads its file: tens
    of milliseconds the event loop would otherwise stand still."""
    readers: list[str] = []

    def listing() -> set[str]:
        readers.append(threading.current_thread().name)
        return {"Asia/Tokyo"}

    def reading(name: str) -> ZoneInfo:
        readers.append(threading.current_thread().name)
        return ZoneInfo(name)

    monkeypatch.setattr(current_time, "_ZONES", frozenset())
    monkeypatch.setattr(current_time, "_LOADED", {})
    monkeypatch.setattr(current_time, "available_timezones", listing)
    monkeypatch.setattr(current_time, "ZoneInfo", reading)
    result = await call(tool, {"timezone": "Asia/Tokyo"})
    again = await call(tool, {"timezone": "Asia/Tokyo"})

    assert result["utc_offset"] == again["utc_offset"] == "+0900"
    assert len(readers) == 2 and threading.main_thread().name not in readers  # once each
