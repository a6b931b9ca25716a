"""Figures an answer states that nothing the run read gave it.

A small model that skips the tool, or calls the wrong one, still answers with figures: "22 °C
in Cairo", "it is 17:00 in London". They read exactly like looked-up ones, so the person cannot
tell. A figure is grounded when the person's messages, a tool's result, an earlier answer or
the system message holds it (rounded as the answer rounds it: 41,666.67 from 41666.6666).
Single digits are left alone: prose is full of them ("in 2 steps"), and a made-up one is
rarely the point of an answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.events import FinishVerified
from agent.messages import Message
from agent.metrics import Metric
from agent.run import RunContext, RunRecorder

__all__ = ["figures_grounded", "unchecked_figures", "ungrounded_figures"]

# 41,666.67 (thousands grouped), 22.5, 2026; the sign is never part of it.
_FIGURE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


def ungrounded_figures(answer: str, sources: Iterable[str]) -> list[str]:
    """The words of `answer` holding a figure (two digits or more, or with decimals) that no
    text of `sources` holds: "17:00", "22.5°C", in the answer's order, each once."""
    words: dict[str, list[str]] = {}
    for word in answer.split():
        figures = [f for f in _FIGURE.findall(word) if len(f) > 1]
        if figures:
            words[word.strip(_PUNCTUATION)] = figures
    if not words:
        return []
    known = {_value(f) for text in sources for f in _FIGURE.findall(text)}
    return [w for w, figures in words.items() if not all(_grounded(f, known) for f in figures)]


_PUNCTUATION = ".,;:!?()[]\"'"


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
    figures = ungrounded_figures(answer, _read(rec, system))
    if not figures:
        return True
    rec.want_call()
    ctx.metrics[Metric.ANSWERS_UNGROUNDED] += 1
    named = ", ".join(figures[:5])
    rec.discard_answer()  # a draft that went out is withdrawn by the verdict
    await ctx.sink.emit(FinishVerified(step, False, _LOOKING_UP.format(named)))
    note = ctx.prompts.render("agent_figures_note", figures=named)
    await rec.add(Message("system", note, phase="verify", run_id=run_id))
    return False


def unchecked_figures(rec: RunRecorder, answer: str, system: str) -> str:
    """What the answer adds, once sent back, when it still states figures nothing the run
    read gave: it stands (a sum worked out, a fact known), and says which figures no tool
    checked. "22 degrees in Cairo", written twice with only a clock to call, would
    otherwise read like a looked-up temperature."""
    if not rec.figures_checked:
        return ""
    figures = ungrounded_figures(answer, _read(rec, system))
    return f"\n\n({_UNCHECKED.format(', '.join(figures[:5]))})" if figures else ""


def _read(rec: RunRecorder, system: str) -> list[str]:
    """What the run read: the system message, the person's messages, the tools' results and
    earlier turns' answers; not its own words in this run, nor the notes that name the
    figures in doubt."""
    run_id = rec.ctx.run_id
    return [
        system,
        *(
            m.content
            for m in rec.conversation
            if m.run_id != run_id or (m.role != "assistant" and m.phase != "verify")
        ),
    ]


# What the person reads (not in prompts/: the model never reads these).
_LOOKING_UP = "No tool returned {}: the answer is looked into before it is given."
_UNCHECKED = "No tool gave me {}: I could not check it."
