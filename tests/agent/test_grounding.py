"""An answer with figures nothing the run read gave is sent back once (agent/grounding.py).

Qwen2.5-0.5B, asked the weather in Oslo, called no tool and answered "clear, 22 °C"; asked how
warm Cairo is, it called the clock and answered "22.5 °C". Both read like looked-up answers.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agent.events import AnswerDelta, FinishVerified, RunCompleted
from agent.grounding import ungrounded_figures
from agent.metrics import Metric
from agent.ports import ToolContext
from agent.tools.base import Tool
from tests.fakes.openai_server import FakeToolCall, act, observe, reason, text
from tests.fakes.scripted_model import Harness


class CityArgs(BaseModel):
    city: str


async def _weather(args: CityArgs, context: ToolContext) -> Any:
    return {"city": args.city, "temperature_c": 28, "conditions": "sunny"}


WEATHER = Tool("get_weather", "The weather in a city now.", CityArgs, _weather)


@pytest.fixture
def harness() -> Harness:
    return Harness(tools=[WEATHER])


def test_a_figure_no_source_holds_is_named_by_its_word() -> None:
    clock = '{"iso": "2026-11-28T10:23:31+00:00"}'
    assert ungrounded_figures("It is 17:00 in London, 22.5°C.", [clock]) == ["17:00", "22.5°C"]
    assert ungrounded_figures("It is 10:23 in London.", [clock]) == []


def test_figures_are_grounded_as_the_answer_rounds_them() -> None:
    result = '{"amount": 41666.6666, "rate": 90.0}'
    assert ungrounded_figures("41,666.67 euros at 90, or 41666.7.", [result]) == []
    assert ungrounded_figures("41,666.68 euros", [result]) == ["41,666.68"]


def test_single_digits_and_words_without_figures_pass() -> None:
    assert ungrounded_figures("Paris, in 2 steps, -3 °C.", []) == []


def _sent_back_then_looked_up(harness: Harness, made_up: str) -> None:
    """Step 1 calls nothing and answers `made_up` °C; step 2's Act, asked by schema, calls
    the weather, and the answer is what it returned."""
    harness.model.structured_output = True  # the server can be asked for the call by schema
    harness.model.script(
        "act",
        act(),  # step 1: no call
        text('{"tool": "get_weather", "arguments": {"city": "Cairo"}}'),  # step 2: by schema
    )
    harness.model.script(
        "observe",
        observe("Looked.", final=f"It is {made_up} °C in Cairo."),
        observe("Read it.", final="It is 28 °C and sunny in Cairo."),
    )


async def test_a_made_up_figure_is_sent_back_and_the_next_act_asks_for_a_call(
    harness: Harness,
) -> None:
    _sent_back_then_looked_up(harness, "22.5")
    record = await harness.run("How warm is it in Cairo?", max_steps=3)
    (verdict,) = record.of(FinishVerified)
    assert (verdict.step, verdict.done) == (1, False)
    assert "22.5" in verdict.reason  # the person reads which figure is in doubt
    (completion,) = record.of(RunCompleted)
    assert completion.final_answer == "It is 28 °C and sunny in Cairo."
    assert harness.metrics[Metric.ANSWERS_UNGROUNDED] == 1
    note = [m for m in record.messages if m.role == "system" and "22.5" in m.content]
    assert note and note[0].phase == "verify"  # Reason reads it, and Act asked by schema
    (step_2_act,) = [c for c in harness.model.calls if c.phase == "act" and c.step == 2]
    assert step_2_act.response_format is not None  # a plain request could not say why


async def test_a_figure_stated_again_after_the_check_stands(harness: Harness) -> None:
    """A fact the model knows is no tool's: asked once, its answer is then given, saying
    which figure no tool checked (with only a clock, "22 degrees in Cairo" twice would
    otherwise read like a looked-up temperature)."""
    harness.model.script(
        "observe",
        observe("Recalling.", final="Mount Everest is 8849 m high."),
        observe("Recalling.", final="Mount Everest is 8849 m high."),
    )
    record = await harness.run("How high is Mount Everest?", max_steps=3)
    (completion,) = record.of(RunCompleted)
    said = "Mount Everest is 8849 m high.\n\n(No tool gave me 8849: I could not check it.)"
    assert (completion.steps, completion.final_answer) == (2, said)
    assert len(record.of(FinishVerified)) == 1
    after_verdict = record.events[record.events.index(record.of(FinishVerified)[0]) :]
    deltas = "".join(e.delta for e in after_verdict if isinstance(e, AnswerDelta))
    assert deltas.strip() == said  # the answer's deltas add up to it, as the protocol says


async def test_figures_from_a_result_or_the_task_are_not_checked(harness: Harness) -> None:
    harness.model.script("act", act(FakeToolCall("get_weather", {"city": "Cairo"})))
    harness.model.script("observe", observe("Read it.", final="28 °C in Cairo, as of 2026."))
    record = await harness.run("How warm is it in Cairo in 2026?", max_steps=3)
    assert record.of(FinishVerified) == []
    assert record.of(RunCompleted)[0].steps == 1


def test_one_operation_on_the_request_s_figures_is_grounded() -> None:
    """Asked "What is 12 plus 30?", Qwen2.5-0.5B answered 42, was sent back, called the
    clock, and answered "48 seconds"."""
    asked = ["What is 12 plus 30?"]
    assert ungrounded_figures("12 plus 30 is 42.", asked, asked) == []
    assert ungrounded_figures("It is 48 seconds.", asked, asked) == ["48"]
    split = ["Split 125000 euros in 3 parts."]
    assert ungrounded_figures("41,666.67 euros each.", split, split) == []
    assert ungrounded_figures("It is 42.", ["12 and 30"]) == ["42"]  # a result's: no sum


async def test_a_sum_the_person_asked_for_is_answered_at_once(harness: Harness) -> None:
    harness.model.script("observe", observe("Adding.", final="12 plus 30 is 42."))
    record = await harness.run("What is 12 plus 30?", max_steps=3)
    assert record.of(FinishVerified) == []
    assert record.of(RunCompleted)[0].final_answer == "12 plus 30 is 42."


def test_the_date_grounds_a_date_and_no_temperature() -> None:
    """Qwen2.5-0.5B called the clock for "How warm is it in Cairo today?" and answered
    "28 °C" on the 28th: the day of a date is no temperature."""
    system = "Today is Saturday, 28 November 2026."
    clock = '{"iso": "2026-11-28T12:58:10+00:00", "date": "2026-11-28", "time": "12:58:10"}'
    sources = [system, clock]
    assert ungrounded_figures("It is 28°C in Cairo.", sources) == ["28°C"]
    assert ungrounded_figures("It is 28 degrees.", sources) == ["28"]
    assert ungrounded_figures("It is 12:58 on Saturday 28 November 2026.", sources) == []
    assert ungrounded_figures("Today, the 28th, in 2026.", sources) == []
    assert ungrounded_figures("It is 28 °C.", [*sources, '{"temperature_c": 28}']) == []


async def test_act_text_with_made_up_figures_is_dropped_for_a_call_by_schema(
    harness: Harness,
) -> None:
    """Qwen2.5-0.5B, asked the time in London, wrote "The time in London is 17:00." instead
    of a call; Observe then gave it as the answer. The call is asked for in the same step,
    and the text is never read back."""
    harness.model.structured_output = True
    harness.model.script(
        "act",
        text("It is 22.5 °C in Cairo right now."),  # natively: an answer made up, no call
        text('{"tool": "get_weather", "arguments": {"city": "Cairo"}}'),  # by schema: a call
    )
    harness.model.script("observe", observe("Read it.", final="It is 28 °C in Cairo."))
    record = await harness.run("How warm is it in Cairo?", max_steps=3)
    (completion,) = record.of(RunCompleted)
    assert (completion.steps, completion.final_answer) == (1, "It is 28 °C in Cairo.")
    assert record.of(FinishVerified) == []
    assert harness.metrics[Metric.ACT_TEXTS_UNGROUNDED] == 1
    assert all("22.5" not in m.content for c in harness.model.calls[2:] for m in c.messages)


async def test_act_text_with_figures_it_read_is_kept(harness: Harness) -> None:
    harness.model.structured_output = True
    harness.model.script("act", text("12 plus 30 is 42."))
    harness.model.script("observe", observe("Added.", final="12 plus 30 is 42."))
    record = await harness.run("What is 12 plus 30? It is 42, isn't it?", max_steps=2)
    assert record.of(RunCompleted)[0].final_answer == "12 plus 30 is 42."
    assert harness.metrics[Metric.ACT_TEXTS_UNGROUNDED] == 0
    assert [c.phase for c in harness.model.calls].count("act") == 1  # no call asked for


async def test_a_draft_sent_back_is_not_read_again(harness: Harness) -> None:
    """Qwen2.5-0.5B answered "19:00 UTC" for London, was sent back, called the clock, read
    12:57 in its result, and wrote "19:00 UTC" again: its draft was still in what it read."""
    harness.model.script("act", act(), act(FakeToolCall("get_weather", {"city": "Cairo"})))
    harness.model.script(
        "observe",
        observe("It is 22.5 °C in Cairo.", final="It is 22.5 °C in Cairo."),
        observe("Read it.", final="It is 28 °C in Cairo."),
    )
    record = await harness.run("How warm is it in Cairo?", max_steps=3)
    assert record.of(RunCompleted)[0].final_answer == "It is 28 °C in Cairo."
    verdict = next(i for i, c in enumerate(harness.model.calls) if c.step == 2)
    later = [m for c in harness.model.calls[verdict:] for m in c.messages]
    assert later and all("22.5 °C in Cairo" not in m.content for m in later)
    stored = [m.content for m in record.messages if m.phase == "observe"]
    assert "It is 22.5 °C in Cairo." in stored  # what the person saw stays in the record


async def test_after_a_send_back_act_runs_even_when_reason_would_finish(
    harness: Harness,
) -> None:
    """Qwen2.5-0.5B, sent back for "22 °C in Cairo", said in its next Reason that it could
    finish: Act was skipped, and the same made-up answer came again."""
    harness.model.script("reason", reason(), reason("I can answer now.", finish=True))
    _sent_back_then_looked_up(harness, "22")
    record = await harness.run("How warm is it in Cairo?", max_steps=3)
    (completion,) = record.of(RunCompleted)
    assert (completion.steps, completion.final_answer) == (2, "It is 28 °C and sunny in Cairo.")


class NoteArgs(BaseModel):
    text: str


async def _save(args: NoteArgs, context: ToolContext) -> Any:
    return {"status": "saved", "memory": {"content": args.text}}


async def test_a_result_that_gives_back_the_call_s_own_figures_grounds_none() -> None:
    """Qwen2.5-0.5B, sent back for "17:00" in London, saved "The time in London at the
    moment is 17:00." as a memory: the result held the 17:00 it was given, and the made-up
    time then passed as looked up."""
    harness = Harness(tools=[Tool("memory_save", "Save a note.", NoteArgs, _save)])
    saved = FakeToolCall("memory_save", {"text": "The time in London is 17:00."})
    harness.model.script("act", act(saved))
    harness.model.script("observe", observe("Saved.", final="The time in London is 17:00."))
    record = await harness.run("What's the time in London?", max_steps=1)
    (verdict,) = record.of(FinishVerified)
    assert not verdict.done and "17:00" in verdict.reason
