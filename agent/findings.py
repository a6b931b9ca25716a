"""The answers the server writes itself, when a run ends without one from the model.

A run that runs out of budget, gets stuck, or whose step-limit summary fails still ends with
an answer: why it stopped, the last thing it observed, and what could not be done. The person
reading it is not technical (prompts/system.md), so it says what could not be done in everyday
words, once per kind of failure, and never names a tool, a provider or an HTTP status: that
detail stays in each call's `tool_error` event, where a UI can show it on request.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.approval import DECLINED
from agent.context import RECALL_DETAILS
from agent.echo import word_trigrams
from agent.ledger import CallRecord
from agent.run import RunRecorder

__all__ = [
    "budget_answer",
    "failures_unsaid",
    "no_progress_answer",
    "step_limit_answer",
    "stuck_answer",
    "unable",
]

# What a failed call of each built-in tool could not do, said to the person. A tool not
# listed here (an MCP or Python tool) is one of "the other things I tried".
_COULD_NOT: dict[str, str] = {
    "web_search": "search the web",
    "web_fetch": "open some of the web pages I needed",
    "get_current_time": "look up the current time",
    "memory_save": "remember what you asked me to",
    "memory_retrieve": "look up what I remembered",
    "request_input": "get the answer I needed from you",
    RECALL_DETAILS: "read back part of an earlier result",
}
_OTHER = "finish some of the other things I tried"


def budget_answer(rec: RunRecorder) -> str:
    """The answer of a run whose token or cost budget ran out (no model call is left)."""
    return _answer(rec, "I had to stop here because this task used up its budget.")


def step_limit_answer(rec: RunRecorder) -> str:
    """The answer of a run at its step limit whose summary call wrote none."""
    steps = rec.ctx.limits.max_steps
    limit = f"{steps} step" if steps == 1 else f"{steps} steps"
    return _answer(rec, f"I reached the limit of {limit} before finishing this task.")


def stuck_answer(rec: RunRecorder) -> str:
    """The answer of a run that kept trying the same thing without getting anywhere."""
    return _answer(
        rec,
        "I stopped here because I kept trying the same thing and it kept failing the same way.",
    )


def no_progress_answer(rec: RunRecorder) -> str:
    """The answer of a run whose steps found nothing new: what it found, said once."""
    return _answer(rec, "I stopped here because I was not getting any further.")


def unable(failures: Sequence[CallRecord]) -> str:
    """One sentence naming what `failures` could not do, each kind once ("" for none)."""
    kinds = list(dict.fromkeys(_COULD_NOT.get(r.name, _OTHER) for r in failures))
    if not kinds:
        return ""
    listed = kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} or {kinds[-1]}"
    return f"I could not {listed}."


def failures_unsaid(rec: RunRecorder, answer: str) -> str:
    """What an answer adds when the run's last calls failed, none succeeded since, and the
    answer says nothing of it (no three words in a row of a failure's error, nor of the
    sentence added here): which things could not be done. Qwen2.5-0.5B read "No weather
    data for 'Atlantis'" and answered "The weather in Atlantis is cloudy."; a check by the
    model passed it. No model is asked here: the run's own record of its calls says what
    failed. A call the person declined is their choice, not a failure to tell them of."""
    failures = [r for r in rec.ledger.unresolved_failures() if not r.detail.startswith(DECLINED)]
    added = unable(failures)
    said = word_trigrams(answer)
    if not failures or any(
        said & word_trigrams(text) for text in [added, *(r.detail for r in failures)]
    ):
        return ""
    return f"\n\n({added})"


def _answer(rec: RunRecorder, why: str) -> str:
    """`why` the run stops, then its last observation and what could not be done: an answer
    that keeps what the run found when the model wrote none."""
    found = next(
        (
            m.content
            for m in reversed(rec.conversation)
            if m.run_id == rec.ctx.run_id and m.phase == "observe" and m.content
        ),
        "",
    )
    parts = [why]
    if found:
        parts.append(f"What I found so far: {found}")
    failed = unable(rec.ledger.unresolved_failures())
    if failed:
        parts.append(failed)
    return " ".join(parts)
