"""Figures an answer states that nothing the run read gave it.

A small model that skips the tool, or calls the wrong one, still answers with figures: "22 °C
in Cairo", "it is 17:00 in London". They read exactly like looked-up ones, so the person cannot
tell. A figure is grounded when the person's messages, a tool's result, an earlier answer or
the system message holds it (rounded as the answer rounds it: 41,666.67 from 41666.6666).
Single digits are left alone: prose is full of them ("in 2 steps"), and a made-up one is
rarely the point of an answer.

A sum, difference, product or quotient of two figures of the person's request is grounded
too: asked "What is 12 plus 30?", Qwen2.5-0.5B answered 42, was sent back, called
the clock and answered "48 seconds".

The parts of a date or a time ground only a date or a time: the 28 of "28 November 2026" or
of a clock's "2026-11-28" is no temperature. Qwen2.5-0.5B called the clock for "How warm is
it in Cairo today?" and answered "28 °C" on the 28th.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from agent.events import FinishVerified
from agent.messages import Message
from agent.metrics import Metric
from agent.run import RunContext, RunRecorder

__all__ = ["figures_grounded", "figures_made_up", "unchecked_figures", "ungrounded_figures"]

# 41,666.67 (thousands grouped), 22.5, 2026; the sign is never part of it.
_FIGURE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
# A date or a time in a source: 2026-11-28T12:56:37, 12:56, 28 November 2026, Nov 28, 2026.
_CALENDAR = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?|\d{1,2}:\d{2}(?::\d{2})?"
    rf"|\b{_DAY}\s+(?:{_MONTHS})\b(?:\s+\d{{4}})?|\b(?:{_MONTHS})\s+{_DAY}(?:,?\s+\d{{4}})?",
    re.IGNORECASE,
)
# A word of an answer that is part of a date or a time: 17:00, 2026-11-28, 28th, 1999.
_CALENDAR_WORD = re.compile(r"\d[:/-]\d|^\d{1,2}(?:st|nd|rd|th)$|^(?:19|20)\d\d$")
_CALENDAR_NEIGHBOUR = re.compile(rf"(?:{_MONTHS}|{_WEEKDAYS})", re.IGNORECASE)


def ungrounded_figures(answer: str, sources: Iterable[str], asked: Iterable[str] = ()) -> list[str]:
    """The words of `answer` holding a figure (two digits or more, or with decimals) that no
    text of `sources` holds, nor one operation on two figures of `asked` (the person's
    request): "17:00", "22.5°C", in the answer's order, each once. A figure of a source's
    date or time grounds only a word of a date or a time."""
    tokens = [word.strip(_PUNCTUATION) for word in answer.split()]
    words: dict[str, tuple[list[str], bool]] = {}
    for i, word in enumerate(tokens):
        figures = [f for f in _FIGURE.findall(word) if len(f) > 1]
        if figures and word not in words:
            words[word] = (figures, _calendar_word(tokens, i))
    if not words:
        return []
    plain: set[float] = set()
    calendar: set[float] = set()
    for text in sources:
        calendar.update(
            _value(f) for span in _CALENDAR.findall(text) for f in _FIGURE.findall(span)
        )
        plain.update(_value(f) for f in _FIGURE.findall(_CALENDAR.sub(" ", text)))
    plain |= _worked_out({_value(f) for text in asked for f in _FIGURE.findall(text)})
    both = plain | calendar
    return [
        word
        for word, (figures, of_calendar) in words.items()
        if not all(_grounded(f, both if of_calendar else plain) for f in figures)
    ]


_PUNCTUATION = ".,;:!?()[]\"'"


_MOST_ASKED = 20  # figures of the person's messages combined: 4 × 20² results at most


def _worked_out(figures: set[float]) -> set[float]:
    """`figures`, and what one operation on two of them gives: the arithmetic the person
    asked for."""
    some = sorted(figures)[:_MOST_ASKED]
    results = set(some)
    for a, b in itertools.combinations(some, 2):
        results.update((a + b, b - a, a * b, b / a if a else b))
    return results


def _calendar_word(tokens: list[str], i: int) -> bool:
    """Whether `tokens[i]` is part of a date or a time: written as one, or beside a month's
    or a weekday's name ("28 November", "Saturday 28")."""
    if _CALENDAR_WORD.search(tokens[i]):
        return True
    beside = tokens[max(i - 1, 0) : i] + tokens[i + 1 : i + 2]
    return any(_CALENDAR_NEIGHBOUR.fullmatch(word) for word in beside)


def _grounded(figure: str, known: set[float]) -> bool:
    value = _value(figure)
    decimals = len(figure.partition(".")[2])
    return value in known or any(round(k, decimals) == value for k in known)


def _value(figure: str) -> float:
    return float(figure.replace(",", ""))


async def figures_grounded(
    ctx: RunContext, rec: RunRecorder, step: int, answer: str, system: str
) -> bool:
    """False when `answer` states figures that nothing the run read gave: the person is told
    the answer is looked into, the model is told which figures, and the next Act asks for a
    call. Once per run: stated again after that, the figures stand (a sum the model worked
    out, a fact it knows)."""
    if rec.figures_checked or not ctx.tools.specs(ctx.tool_names):  # nothing to look up with
        return True
    run_id = ctx.run_id
    figures = ungrounded_figures(answer, _read(rec, system), _asked(rec))
    if not figures:
        return True
    rec.want_call()
    ctx.metrics[Metric.ANSWERS_UNGROUNDED] += 1
    # The draft is not read back: Qwen2.5-0.5B wrote its "19:00" again beside the clock's 12:57.
    rec.withdraw(
        m
        for m in rec.conversation
        if m.run_id == run_id
        and m.role == "assistant"
        and not m.tool_calls
        and any(word in m.content for word in figures)
    )
    named = ", ".join(figures[:5])
    rec.discard_answer()  # a draft that went out is withdrawn by the verdict
    await ctx.sink.emit(FinishVerified(step, False, _LOOKING_UP.format(named)))
    note = ctx.prompts.render("agent_figures_note", figures=named)
    await rec.add(Message("system", note, phase="verify", run_id=run_id))
    return False


def figures_made_up(ctx: RunContext, rec: RunRecorder, text: str, system: str) -> bool:
    """Act wrote `text` instead of a call, and it states figures nothing the run read gave:
    an answer made up where a lookup was due ("The time in London is 17:00."), so a call is
    asked for instead, and the text is dropped before Observe can copy it."""
    if not text.strip() or not ctx.tools.specs(ctx.tool_names):
        return False
    return bool(ungrounded_figures(text, _read(rec, system), _asked(rec)))


def unchecked_figures(rec: RunRecorder, answer: str, system: str) -> str:
    """What the answer adds, once sent back, when it still states figures nothing the run
    read gave: it stands (a sum worked out, a fact known), and says which figures no tool
    checked. "22 degrees in Cairo", written twice with only a clock to call, would
    otherwise read like a looked-up temperature."""
    if not rec.figures_checked:
        return ""
    figures = ungrounded_figures(answer, _read(rec, system), _asked(rec))
    return f"\n\n({_UNCHECKED.format(', '.join(figures[:5]))})" if figures else ""


def _read(rec: RunRecorder, system: str) -> list[str]:
    """What the run read: the system message, the person's messages, the tools' results and
    earlier turns' answers; not its own words in this run, nor the notes that name the
    figures in doubt, nor the figures a result only gives back from its call's arguments."""
    run_id = rec.ctx.run_id
    arguments = {c.id: c.arguments for m in rec.conversation for c in m.tool_calls}
    return [
        system,
        *(
            _without_echo(m.content, arguments.get(m.tool_call_id or "", ""))
            for m in rec.conversation
            if m.run_id != run_id or (m.role != "assistant" and m.phase != "verify")
        ),
    ]


def _asked(rec: RunRecorder) -> list[str]:
    """The person's message that started the run, whose figures the answer may work out."""
    return [rec.task()]


def _without_echo(result: str, arguments: str) -> str:
    """`result` without the figures its call's arguments gave it: a figure the model wrote
    into a call is still the model's. Qwen2.5-0.5B, sent back for "17:00" in London, saved
    "The time in London is 17:00." as a memory, whose result then held the 17:00."""
    for figure in sorted(set(_FIGURE.findall(arguments)), key=len, reverse=True):
        result = re.sub(rf"(?<![\d.,]){re.escape(figure)}(?![\d]|[.,]\d)", " ", result)
    return result


# What the person reads (not in prompts/: the model never reads these).
_LOOKING_UP = "No tool returned {}: the answer is looked into before it is given."
_UNCHECKED = "No tool gave me {}: I could not check it."
