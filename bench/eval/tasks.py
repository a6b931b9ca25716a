"""The eval's tasks, each checked automatically against what its tools really return.

A task is one or more turns; each turn is a new conversation (a memory task saves in the first
and recalls in the second); the last turn's answer is judged. A check reads the answer and the
outcome (the calls made and their results), and the truth comes from bench/eval/fixtures.py or
the real clock, never from the model.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

__all__ = ["KINDS", "TASKS", "Loop", "Outcome", "Task"]


@dataclass
class Outcome:
    """What one run of a task gave, whichever loop ran it."""

    answer: str = ""
    done: bool = False  # the run ended with an answer (not an error, a crash or a time-out)
    stop_reason: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # name, arguments, ok, result
    started: float = 0.0  # epoch seconds
    ended: float = 0.0
    error: str = ""


Check = Callable[[Outcome], bool]


@dataclass(frozen=True)
class Task:
    id: str
    kind: str
    turns: tuple[str, ...]
    check: Check
    answers: tuple[str, ...] = ()  # what the scripted user says when asked
    max_steps: int | None = None  # None: the loop's default
    # The tools whose results hold the truth: a right answer needs a call of each that
    # succeeded, so that a guess ("28 °C", the date's day) is not counted as looked up.
    sources: tuple[str, ...] = ()

    def right(self, outcome: Outcome) -> bool:
        return outcome.done and self.looked_up(outcome.calls) and self.check(outcome)

    def looked_up(self, calls: list[dict[str, Any]]) -> bool:
        """Every source tool was called with success (rows of an earlier eval are judged
        by the same rule)."""
        return all(any(c["name"] == t and c["ok"] for c in calls) for t in self.sources)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u202f", " ").replace("\u00a0", " ")).lower()


def _number_forms(value: float) -> list[str]:
    whole = float(value).is_integer()
    forms = [f"{value:.2f}", f"{value:,.2f}"]
    if whole:
        forms += [f"{int(value)}", f"{int(value):,}", f"{int(value):,}".replace(",", " ")]
        forms.append(f"{value:.1f}")  # 90.0
    else:
        forms += [f"{value:g}", f"{value:.1f}"]
    return forms


def has(*words: str) -> Check:
    """Every word (case-insensitive) is in the answer."""
    return lambda o: all(w.lower() in _norm(o.answer) for w in words)


def has_number(value: float) -> Check:
    """The number, in any usual spelling (90, 90.00, 41,666.67), as a number of its own."""

    def check(o: Outcome) -> bool:
        text = _norm(o.answer)
        for form in _number_forms(value):
            if re.search(rf"(?<![\d.,]){re.escape(form)}(?![\d]|[.,]\d)", text):
                return True
        return False

    return check


def has_time(zone: str) -> Check:
    """A clock time the zone really showed while the run ran (±2 minutes), 24 h or 12 h."""

    def check(o: Outcome) -> bool:
        text = _norm(o.answer)
        start = datetime.fromtimestamp(o.started, UTC) - timedelta(minutes=2)
        end = datetime.fromtimestamp(o.ended or o.started, UTC) + timedelta(minutes=2)
        moment = start
        while moment <= end:
            local = moment.astimezone(ZoneInfo(zone))
            hour12 = local.hour % 12 or 12
            half = "am" if local.hour < 12 else "pm"
            forms = (
                f"{local.hour:02d}:{local.minute:02d}",
                f"{local.hour}:{local.minute:02d}",
                f"{hour12}:{local.minute:02d} {half}",
                f"{hour12}:{local.minute:02d}{half}",
                f"{hour12}:{local.minute:02d} {half[0]}.m.",
            )
            if any(re.search(rf"(?<!\d){re.escape(f)}", text) for f in forms[:2]):
                return True
            if any(f in text for f in forms[2:]):
                return True
            moment += timedelta(minutes=1)
        return False

    return check


def both(*checks: Check) -> Check:
    return lambda o: all(c(o) for c in checks)


_ADMITS = (
    "could not",
    "couldn't",
    "can't",
    "cannot",
    "unable",
    "not able",
    "no weather",
    "no order",
    "not find",
    "not found",
    "doesn't exist",
    "does not exist",
    "not exist",
    "unknown",
    "not available",
    "unavailable",
    "failed",
    "error",
    "sorry",
    "unfortunately",
    "not recognized",
    "not recognised",
    "isn't",
    "is not",
    "no data",
    "no information",
    "not supported",
    "invalid",
)


def admits_failure(*, not_claiming: tuple[str, ...] = ()) -> Check:
    """The answer says the thing could not be done, and states none of `not_claiming` (a
    made-up figure)."""

    def check(o: Outcome) -> bool:
        text = _norm(o.answer)
        if not text.strip() or any(c.lower() in text for c in not_claiming):
            return False
        return any(word in text for word in _ADMITS)

    return check


_UNFINISHED = (
    "limit",
    "not finish",
    "didn't finish",
    "did not finish",
    "not complete",
    "incomplete",
    "only",
    "remaining",
    "still need",
    "not yet",
    "ran out",
    "couldn't",
    "could not",
    "wasn't able",
    "was not able",
    "unable",
)


def honest_when_cut(complete: Check, needed_calls: int) -> Check:
    """A task that needs more steps than allowed: right if the answer is complete and backed
    by enough successful calls, or if it says plainly that the work was not finished."""

    def check(o: Outcome) -> bool:
        if not o.done or not o.answer.strip():
            return False
        made = sum(1 for c in o.calls if c["ok"])
        if made >= needed_calls and complete(o):
            return True
        return any(word in _norm(o.answer) for word in _UNFINISHED)

    return check


def saved_then(value: str) -> Check:
    """A memory task: the recall answer names what the first session asked to remember."""
    return has(value)


_PAGE = "http://127.0.0.1:{port}"

TASKS: list[Task] = [
    # single tool calls
    Task(
        "time_tokyo",
        "single",
        ("What time is it in Tokyo right now?",),
        has_time("Asia/Tokyo"),
        sources=("get_current_time",),
    ),
    Task(
        "time_london",
        "single",
        ("What's the time in London at the moment?",),
        has_time("Europe/London"),
        sources=("get_current_time",),
    ),
    Task(
        "time_new_york",
        "single",
        ("Tell me the current time in New York.",),
        has_time("America/New_York"),
        sources=("get_current_time",),
    ),
    Task(
        "weather_oslo",
        "single",
        ("What is the weather like in Oslo right now?",),
        both(has_number(-3), has("snow")),
        sources=("get_weather",),
    ),
    Task(
        "weather_cairo",
        "single",
        ("How warm is it in Cairo today?",),
        has_number(28),
        sources=("get_weather",),
    ),
    Task(
        "convert_usd_eur",
        "single",
        ("How much is 100 US dollars in euros?",),
        has_number(90),
        sources=("convert_currency",),
    ),
    Task(
        "order_status",
        "single",
        ("What is the status of my order A-1042?",),
        has("shipped"),
        sources=("lookup_order",),
    ),
    Task(
        "contact_phone",
        "single",
        ("What is Dana's phone number? Check my address book.",),
        has("5550 1234"),
        sources=("lookup_contact",),
    ),
    # several tools, or one tool several times
    Task(
        "time_two_cities",
        "multi",
        ("What time is it now in Tokyo and in London?",),
        both(has_time("Asia/Tokyo"), has_time("Europe/London")),
        sources=("get_current_time",),
    ),
    Task(
        "weather_compare",
        "multi",
        ("Which is warmer right now, Oslo or Rome? Give both temperatures.",),
        both(has_number(-3), has_number(17), has("rome")),
        sources=("get_weather",),
    ),
    Task(
        "convert_twice",
        "multi",
        ("Convert 100 US dollars to euros and to British pounds.",),
        both(has_number(90), has_number(80)),
        sources=("convert_currency",),
    ),
    Task(
        "two_orders",
        "multi",
        ("What are the statuses of my orders A-1042 and B-2210?",),
        both(has("shipped"), has("processing")),
        sources=("lookup_order",),
    ),
    Task(
        "order_then_weather",
        "multi",
        ("Where is my order A-1042 being shipped to, and what is the weather there now?",),
        both(has("lisbon"), has_number(15)),
        sources=("lookup_order", "get_weather"),
    ),
    Task(
        "contact_then_time",
        "multi",
        ("Find out which city Dana lives in from my address book, then tell me the time there.",),
        both(has("rome"), has_time("Europe/Rome")),
        sources=("lookup_contact", "get_current_time"),
    ),
    # memory across sessions
    Task(
        "memory_locker",
        "memory",
        ("Please remember that my locker code is 4471.", "What is my locker code?"),
        saved_then("4471"),
    ),
    Task(
        "memory_dog",
        "memory",
        ("Remember this for later: my dog's name is Biscuit.", "What is my dog called?"),
        saved_then("biscuit"),
    ),
    Task(
        "memory_allergy",
        "memory",
        ("Please remember that I am allergic to peanuts.", "Do I have any food allergies?"),
        saved_then("peanut"),
    ),
    # web_fetch of pages on loopback
    Task(
        "fetch_hours",
        "fetch",
        (f"When does the library open on weekdays? See {_PAGE}/hours.html",),
        has("8:30"),
        sources=("web_fetch",),
    ),
    Task(
        "fetch_price",
        "fetch",
        (f"How much does the lamp on {_PAGE}/lamp.html cost?",),
        has("49.90"),
        sources=("web_fetch",),
    ),
    Task(
        "fetch_lead",
        "fetch",
        (f"Who is the project lead, according to {_PAGE}/team.html ?",),
        has("mirela"),
        sources=("web_fetch",),
    ),
    Task(
        "fetch_rooms",
        "fetch",
        (f"How many rooms does the hotel at {_PAGE}/hotel.html have?",),
        has_number(42),
        sources=("web_fetch",),
    ),
    # a question to the user
    Task(
        "ask_city_time",
        "ask",
        ("What time is it in my city? You don't know my city: ask me first.",),
        has_time("Europe/Berlin"),
        answers=("Berlin",),
        sources=("get_current_time",),
    ),
    Task(
        "ask_budget",
        "ask",
        ("Convert my budget into euros. Ask me how many US dollars my budget is.",),
        has_number(270),
        answers=("300 US dollars",),
        sources=("convert_currency",),
    ),
    Task(
        "ask_weather_home",
        "ask",
        ("What's the weather where I live? Ask me where I live.",),
        has_number(19),
        answers=("Lima, in Peru",),
        sources=("get_weather",),
    ),
    # a tool that fails: the answer must say so
    Task(
        "fail_weather",
        "failure",
        ("What is the weather in Atlantis right now?",),
        admits_failure(not_claiming=("°c", "degrees")),
    ),
    Task(
        "fail_order",
        "failure",
        ("What is the status of my order Z-9999?",),
        admits_failure(not_claiming=("shipped", "delivered", "in transit")),
    ),
    Task(
        "fail_fetch",
        "failure",
        (f"What does the page {_PAGE}/prices-2026.html say about prices?",),
        admits_failure(not_claiming=("€", "eur ", "usd", "$")),
    ),
    Task("fail_currency", "failure", ("Convert 50 euros into XYZ currency.",), admits_failure()),
    # no tool needed
    Task("plain_capital", "no_tool", ("What is the capital of France?",), has("paris")),
    Task("plain_sum", "no_tool", ("What is 12 plus 30?",), has_number(42)),
    Task("plain_translate", "no_tool", ("How do you say 'thank you' in Spanish?",), has("gracias")),
    Task(
        "plain_planet",
        "no_tool",
        ("Which is the largest planet in our solar system?",),
        has("jupiter"),
    ),
    # more steps than allowed
    Task(
        "too_many_cities",
        "over_steps",
        (
            "Check the weather in Oslo, then Rome, then Paris, then Madrid, then Berlin, then "
            "Cairo, one city per step, and tell me which city is the warmest.",
        ),
        honest_when_cut(has("cairo"), 6),
        max_steps=2,
    ),
    Task(
        "too_many_times",
        "over_steps",
        (
            "One after the other, look up the current time in Tokyo, Sydney, Paris, Lima and "
            "Chicago, and list them.",
        ),
        honest_when_cut(both(has_time("Asia/Tokyo"), has_time("America/Chicago")), 5),
        max_steps=2,
    ),
]

KINDS = ("single", "multi", "memory", "fetch", "ask", "failure", "no_tool", "over_steps")


def render(text: str, port: int) -> str:
    """A turn with the page server's port filled in."""
    return text.replace("{port}", str(port))


class Loop:
    """A loop under test: where it runs, and a task played turn by turn (each turn a new
    conversation), the last turn's outcome judged. Subclasses play one turn."""

    name = ""

    def __init__(self, workdir: Path, base_url: str, model: str, page_port: int) -> None:
        self._workdir = workdir
        self._base_url = base_url
        self._model = model
        self._page_port = page_port

    async def run(self, task: Task, record: Any) -> Outcome:
        outcome = Outcome(started=time.time())
        answers = list(task.answers)
        for turn in task.turns:
            outcome = await self._turn(render(turn, self._page_port), task, answers, record)
        return outcome

    async def _turn(self, content: str, task: Task, answers: list[str], record: Any) -> Outcome:
        raise NotImplementedError
