"""An answer after calls that failed, with nothing succeeding since, says so (agent/findings.py).

Qwen2.5-0.5B read "No weather data for 'Atlantis'" and answered "The weather in Atlantis is
cloudy."; the model's own check of the finish passed it.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agent.errors import ToolError
from agent.events import AnswerDelta, RunCompleted
from agent.ports import ToolContext
from agent.tools.base import Tool
from tests.fakes.openai_server import FakeToolCall, act, observe
from tests.fakes.scripted_model import Harness

CAVEAT = "\n\n(I could not finish some of the other things I tried.)"


class CityArgs(BaseModel):
    city: str


async def _weather(args: CityArgs, context: ToolContext) -> Any:
    if args.city == "Atlantis":
        raise ToolError(f"No weather data for {args.city!r}: the weather service does not know it.")
    return {"city": args.city, "conditions": "light snow"}


@pytest.fixture
def harness() -> Harness:
    return Harness(tools=[Tool("get_weather", "The weather in a city.", CityArgs, _weather)])


def _asked(city: str) -> Any:
    return act(FakeToolCall("get_weather", {"city": city}))


async def test_an_answer_that_says_nothing_of_a_failure_ends_with_it(harness: Harness) -> None:
    harness.model.script("act", _asked("Atlantis"))
    harness.model.script("observe", observe("Read it.", final="It is cloudy in Atlantis."))
    record = await harness.run("What is the weather in Atlantis?", max_steps=2, max_verifications=0)
    (completion,) = record.of(RunCompleted)
    assert completion.final_answer == "It is cloudy in Atlantis." + CAVEAT
    deltas = "".join(e.delta for e in record.of(AnswerDelta))
    assert deltas.strip() == completion.final_answer  # the deltas add up to the answer


async def test_an_answer_that_tells_the_failure_is_left_as_it_is(harness: Harness) -> None:
    harness.model.script("act", _asked("Atlantis"))
    said = "Sorry, there is no weather data for Atlantis."  # in the error's words
    harness.model.script("observe", observe("Read it.", final=said))
    record = await harness.run("What is the weather in Atlantis?", max_steps=2, max_verifications=0)
    assert record.of(RunCompleted)[0].final_answer == said


async def test_a_failure_a_later_call_made_good_is_not_told(harness: Harness) -> None:
    harness.model.script("act", _asked("Atlantis"), _asked("Oslo"))
    harness.model.script(
        "observe", observe("Try Oslo."), observe("Read it.", final="Light snow in Oslo.")
    )
    record = await harness.run("What is the weather in Atlantis, or else Oslo?", max_steps=3)
    assert record.of(RunCompleted)[0].final_answer == "Light snow in Oslo."


async def test_an_answer_that_says_what_could_not_be_done_is_left_as_it_is(
    harness: Harness,
) -> None:
    harness.model.script("act", _asked("Atlantis"))
    said = "I could not get the weather of that place."  # in the words the caveat would use
    harness.model.script("observe", observe("Read it.", final=said))
    record = await harness.run("What is the weather in Atlantis?", max_steps=2, max_verifications=0)
    assert record.of(RunCompleted)[0].final_answer == said
