"""Long runs through the public protocol, with a scripted model that records every request:
every request fits the context budget however many steps a run takes, and every stored
result can be read back whole, piece by piece."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from agent.tokens import LazyExactCounter, counter_for_model
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Recorded, Reply, act, observe
from tests.fakes.openai_server import _default as default_reply
from tests.fakes.servers import serve
from tests.fakes.tools import Flaky, echo_tool

WINDOW = 4096
BUDGET = WINDOW - WINDOW // 4  # the reserve is at most a quarter of the window


async def _exact_counter() -> LazyExactCounter:
    counter = counter_for_model("gpt-4o-mini")  # the server's (one per model and process)
    assert isinstance(counter, LazyExactCounter)
    await asyncio.to_thread(counter.load)  # else its first counts are estimates
    return counter


def _message_tokens(counter: LazyExactCounter, request: Recorded) -> int:
    """The tokens of a recorded request's messages, counted as the server counts them."""
    total = 0
    for message in request.body["messages"]:
        total += 4 + counter.count(message.get("content") or "")
        for call in message.get("tool_calls") or ():
            function = call["function"]
            total += 4 + counter.count(function["name"]) + counter.count(function["arguments"])
    return total


def _tool_tokens(counter: LazyExactCounter, request: Recorded) -> int:
    """The tokens of a recorded request's tool list, counted as the server counts them."""
    total = 0
    for tool in request.body.get("tools") or ():
        f = tool["function"]
        schema = json.dumps(f["parameters"], separators=(",", ":"), ensure_ascii=False)
        total += 8 + counter.count(f"{f['name']} {f['description']} {schema}")
    return total


def _one_call_per_step(failing: bool) -> Callable[[str], Reply]:
    """Every step reasons, calls a tool once (a long text, or a city with no data: each
    failure new, so the run is not stuck), and goes on."""
    cities = (f"Town{i} " + "x" * 200 for i in itertools.count(1))

    def reply(phase: str) -> Reply:
        if phase == "act" and failing:
            return act(FakeToolCall("weather", {"city": next(cities)}))
        if phase == "act":
            words = " ".join(f"w{i}" for i in range(300))
            return act(FakeToolCall("echo", {"text": f"Result details: {words}"}))
        if phase == "observe":
            return observe("I have part of it; the next step looks further.")
        return default_reply(phase)

    return reply


@pytest.mark.parametrize("failing", [False, True], ids=["results", "failures"])
async def test_a_50_step_run_stays_inside_a_4096_token_window(
    server_factory, fake_llm: FakeLLM, failing: bool
):
    counter = await _exact_counter()
    fake_llm.default = _one_call_per_step(failing)
    weather = Flaky(set()) if not failing else Flaky(_AllBroken())
    options = {
        "extra_tools": [echo_tool, weather.tool],
        "tools": {"enabled": ["echo", "weather"]},
        "context": {"window_tokens": WINDOW},
    }
    async with server_factory(**options) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("Collect every detail.", agent_max_steps=50, timeout=120)
    completion = frames[-2]
    assert completion["stop_reason"] == "max_steps" and completion["steps"] == 50
    ended = "tool_error" if failing else "tool_complete"
    assert len([f for f in frames if kind(f) == ended]) == 50
    # The server's own figures: every call it fitted stayed within the budget.
    context = [f for f in frames if kind(f) == "agent_context"]
    assert context and {f["budget"] for f in context} == {BUDGET}
    assert all(f["exact"] and f["tokens"] <= BUDGET for f in context), [
        (f["step"], f["phase"], f["tokens"]) for f in context if f["tokens"] > BUDGET
    ]
    assert context[-1]["dropped_steps"] > 0
    # What was sent: every request's messages and tool list within the budget; the steps and
    # calls left out are counted where they were.
    assert len(fake_llm.requests) == 50 * 3 + 1  # and the summary at the step limit
    for request in fake_llm.requests:
        size = _message_tokens(counter, request) + _tool_tokens(counter, request)
        assert size <= BUDGET, (request.phase, request.headers.get("x-agent-step"), size)
    last_act = [r for r in fake_llm.requests if r.phase == "act"][-1]
    sent = "\n".join(m.get("content") or "" for m in last_act.body["messages"])
    # older steps were left out, or (short failures, in Act's plain view) summarized
    assert re.search(
        r"\[\d+ earlier steps of this task left out|\[Earlier step, summarized\]", sent
    )
    # Act asks as a plain tool loop does: its request ends with the last result, no state
    assert last_act.body["messages"][-1]["role"] == "tool"
    if failing:  # the note on failed calls keeps the newest
        last_observe = [r for r in fake_llm.requests if r.phase == "observe"][-1]
        note = last_observe.body["messages"][-1]["content"]
        assert re.search(r"\((\d+) earlier failed calls left out", note) and "step 50: " in note
        assert len(weather.runs) == 50


class _AllBroken(set[str]):
    """Every city is broken."""

    def __contains__(self, item: object) -> bool:
        return True


NEEDLE = "The vault code is 7319-kumquat."


PAGE = "".join(f"Line {i:05d}: nothing to see here, keep reading.\n" for i in range(4300))
PAGE += NEEDLE + "\n"


def _big_page() -> Starlette:
    """A 200 KB plain-text page whose last line is the needle."""
    assert len(PAGE) > 200_000

    async def page(request: Request) -> Response:
        return PlainTextResponse(PAGE)

    return Starlette(routes=[Route("/big.txt", page)])


def _marker(request: dict[str, Any]) -> str:
    """The result id named in the cut marker of the fetched page."""
    for message in request["messages"]:
        found = re.search(r'recall_details with result_id "([^"]+)"', message.get("content") or "")
        if found:
            return found.group(1)
    raise AssertionError("no cut marker in the request")


async def test_a_needle_at_the_end_of_a_200_kb_page_can_be_recalled(
    server_factory, fake_llm: FakeLLM
):
    def by_focus(request: dict[str, Any]) -> Reply:
        focus = {"result_id": _marker(request), "focus": "vault code"}
        return act(FakeToolCall("recall_details", focus))

    def near_the_end(request: dict[str, Any]) -> Reply:
        # The stored text is the page after a short envelope: this is near its end.
        end = {"result_id": _marker(request), "offset": len(PAGE) - 300}
        return act(FakeToolCall("recall_details", end))

    async with serve(_big_page()) as address:
        url = f"http://{address}/big.txt"
        fake_llm.script("act", act(FakeToolCall("web_fetch", {"urls": [url]})))
        fake_llm.script("act", by_focus, near_the_end)
        fake_llm.script("observe", observe("Long page."), observe("Found it."))
        fake_llm.script("observe", observe("Read the end.", final="The code is 7319-kumquat."))
        options = {
            "tools": {
                "enabled": ["web_fetch"],
                "web_fetch": {"allow_hosts": ["127.0.0.1"], "max_chars": 250_000},
            },
        }
        async with server_factory(**options) as s:
            async with await s.client() as c:
                session = (await c.recv())["session_id"]
                frames = await c.run("Find the vault code on that page.", agent_max_steps=3)
            async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
                stored = (await http.get(f"/api/sessions/{session}/messages")).json()
    assert frames[-2]["stop_reason"] == "finished"
    done = [f for f in frames if kind(f) == "tool_complete"]
    assert [f["tool_name"] for f in done] == ["web_fetch", "recall_details", "recall_details"]
    assert done[0]["result"]["results"][0]["text"].endswith(NEEDLE)
    focused, tail = done[1]["result"], done[2]["result"]
    assert NEEDLE in focused and len(focused) < 8_000
    assert NEEDLE in tail and tail.endswith("[End of the result.]")
    # Stored as text: the page's lines are lines, after a short JSON envelope.
    page = next(m["content"] for m in stored["messages"] if m["role"] == "tool")
    envelope, text = page.split("\n\n[text 1: results[0].text]\n", 1)
    assert json.loads(envelope)["results"][0]["text"] == "(text 1, below)"
    assert text.endswith(NEEDLE)
    # The recalled pieces fit: no later request had to cut them.
    cut = {
        item["result_id"] for f in frames if kind(f) == "agent_context" for item in f["compressed"]
    }
    assert cut == {done[0]["tool_call_id"]}
