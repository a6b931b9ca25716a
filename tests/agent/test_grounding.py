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
from tests.fakes.openai_server import FakeToolCall, act, observe, text
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


async def test_a_made_up_figure_is_sent_back_and_the_next_act_asks_for_a_call(
    harness: Harness,
) -> None:
    harness.model.structured_output = True  # the server can be asked for the call by schema
    harness.model.script(
        "act",
        act(),  # step 1: no call
        act(),  # step 2: none again, natively...
        text('{"tool": "get_weather", "arguments": {"city": "Cairo"}}'),  # ...by schema, one
    )
    harness.model.script(
        "observe",
        observe("Looked.", final="It is 22.5 °C in Cairo."),
        observe("Read it.", final="It is 28 °C and sunny in Cairo."),
    )
    record = await harness.run("How warm is it in Cairo?", max_steps=3)
    (verdict,) = record.of(FinishVerified)
    assert (verdict.step, verdict.done) == (1, False)
    assert "22.5" in verdict.reason  # the person reads which figure is in doubt
    (completion,) = record.of(RunCompleted)
    assert completion.final_answer == "It is 28 °C and sunny in Cairo."
    assert harness.metrics[Metric.ANSWERS_UNGROUNDED] == 1
    note = [m for m in record.messages if m.role == "system" and "22.5" in m.content]
    assert note and note[0].phase == "verify"  # Reason reads it; Act and Observe do not


async def test_a_figure_stated_again_after_the_check_stands(harness: Harness) -> None:
    """A sum the model works out is no tool's: asked once, its answer is then given, saying
    which figure no tool checked (with only a clock, "22 degrees in Cairo" twice would
    otherwise read like a looked-up temperature)."""
    harness.model.script(
        "observe",
        observe("Adding.", final="12 plus 30 is 42."),
        observe("Adding.", final="12 plus 30 is 42."),
    )
    record = await harness.run("What is 12 plus 30?", max_steps=3)
    (completion,) = record.of(RunCompleted)
    said = "12 plus 30 is 42.\n\n(No tool gave me 42: I could not check it.)"
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
