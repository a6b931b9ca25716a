"""What Act is offered when it is asked for a call by schema (agent/loop.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from agent.events import RunCompleted, ToolStarted
from agent.ports import ToolContext
from agent.tools.base import Tool
from tests.agent.test_grounding import WEATHER
from tests.fakes.openai_server import FakeToolCall, act, observe, reason, text
from tests.fakes.scripted_model import Harness


class LinkArgs(BaseModel):
    url: str


async def _read_page(args: LinkArgs, context: ToolContext) -> Any:
    return {"url": args.url, "text": "Open from 8:30."}


READER = Tool("read_page", "Read a web page.", LinkArgs, _read_page)


def _schema_tools(harness: Harness) -> list[str]:
    (by_schema,) = [c for c in harness.model.calls if c.phase == "act" and c.response_format]
    choices = by_schema.response_format["json_schema"]["schema"]["anyOf"]  # type: ignore[index]
    return [c["properties"]["tool"]["const"] for c in choices]


@pytest.mark.parametrize(
    ("task", "offered"),
    [
        ("How warm is it in Oslo?", ["get_weather", "request_input", "none"]),
        (
            "What does http://127.0.0.1:9/hours.html say?",
            ["read_page", "request_input", "none"],  # the link asked for comes first
        ),
    ],
)
async def test_asked_by_schema_a_link_reader_is_offered_only_with_a_link_in_sight(
    task: str, offered: list[str]
) -> None:
    """Qwen2.5-0.5B, asked Oslo's weather by schema after Reason named web_fetch, fetched
    api.openweathermap.org with YOUR_API_KEY in the URL, get_weather beside it."""
    harness = Harness(tools=[WEATHER, READER])
    harness.model.structured_output = True
    block = json.dumps({"plan": "Read a page.", "tools_to_consider": ["read_page"]})
    harness.model.script("reason", text(f"Read a page.\n```json\n{block}\n```"))
    harness.model.script("act", act(), text('{"tool": "none"}'))
    harness.model.script("observe", observe("Nothing to read.", final="I could not tell."))
    await harness.run(task, max_steps=1)
    assert _schema_tools(harness) == offered


async def test_after_a_step_whose_calls_failed_a_corrected_call_is_asked_for() -> None:
    """Qwen2.5-0.5B asked the clock for "Asia/London", read that the zone is unknown, said
    it could answer, and called nothing more: the run ended stuck."""
    harness = Harness(tools=[WEATHER])
    harness.model.structured_output = True
    harness.model.script(
        "act",
        act(FakeToolCall("get_weather", {"town": "Cairo"})),  # fails: no `city`
        act(),  # step 2: nothing, natively...
        text('{"tool": "get_weather", "arguments": {"city": "Cairo"}}'),  # ...by schema
    )
    harness.model.script("reason", reason("Get the weather."), reason("I can say.", finish=True))
    harness.model.script(
        "observe", observe("That failed."), observe("Read it.", final="Sunny in Cairo.")
    )
    record = await harness.run("How warm is it in Cairo?", max_steps=3)
    acts = [c for c in harness.model.calls if c.phase == "act"]
    assert [a.response_format is not None for a in acts] == [False, False, True]
    assert [e.name for e in record.of(ToolStarted)] == ["get_weather", "get_weather"]
    assert record.of(RunCompleted)[0].final_answer == "Sunny in Cairo."
