"""The calls of one turn (agent/acting.py): each call's end is shown, and its result stored,
as soon as that call ends, not when the slower calls before it end (issue 46, item 8)."""

from __future__ import annotations

import asyncio

import pytest

from agent.events import RunStopped, ToolCompleted, ToolStarted
from tests.fakes.openai_server import FakeToolCall, act, observe
from tests.fakes.scripted_model import Harness
from tests.fakes.tools import Gate, echo_tool


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def harness(gate: Gate) -> Harness:
    return Harness(tools=[gate.tool, echo_tool])


def _calls() -> tuple[FakeToolCall, FakeToolCall]:
    # the slow call first: the model's order must not hold back the fast one's end
    return FakeToolCall("wait_for_gate", {"label": "slow"}), FakeToolCall("echo", {"text": "hi"})


async def test_a_fast_call_is_shown_complete_while_a_slow_one_still_runs(
    harness: Harness, gate: Gate
) -> None:
    slow, fast = _calls()
    harness.model.script("act", act(slow, fast))
    harness.model.script("observe", observe("Both done.", final="Done."))
    task = harness.start("run both")
    await harness.record.wait_for(lambda: bool(harness.record.of(ToolCompleted)))
    (first,) = harness.record.of(ToolCompleted)
    assert first.call_id == fast.id and not gate.opened.is_set()
    stored = [m.tool_call_id for m in harness.record.messages if m.role == "tool"]
    assert stored == [fast.id]  # stored with it: a stop now keeps what was shown
    gate.opened.set()
    async with asyncio.timeout(5):
        await task
    assert [e.call_id for e in harness.record.of(ToolCompleted)] == [fast.id, slow.id]
    assert [e.call_id for e in harness.record.of(ToolStarted)] == [slow.id, fast.id]


async def test_a_stop_after_the_fast_call_ended_keeps_its_result(
    harness: Harness, gate: Gate
) -> None:
    slow, fast = _calls()
    harness.model.script("act", act(slow, fast))
    task = harness.start("run both")
    await harness.record.wait_for(lambda: bool(harness.record.of(ToolCompleted)))
    assert harness.control.request_stop("user")
    async with asyncio.timeout(5):
        await task
    assert harness.record.of(RunStopped)
    # shown once, as it ended; the slow one is recorded as cut short
    assert [e.call_id for e in harness.record.of(ToolCompleted)] == [fast.id]
    results = {m.tool_call_id: m.status for m in harness.record.messages if m.role == "tool"}
    assert results == {fast.id: "ok", slow.id: "stopped"}
