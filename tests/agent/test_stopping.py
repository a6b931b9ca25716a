"""A run cut short is closed the same way whether it was stopped, ended itself, or was left
open by a process that died: through its ports only, no server."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from agent.control import RunControl
from agent.events import RunStopped, ToolCompleted, ToolFailed
from agent.messages import Message, ToolCall
from agent.ports import ToolContext
from agent.run import RunInterrupted
from agent.stopping import close_interrupted, stop_recorded
from agent.tokens import EstimatedCounter, message_tokens
from agent.tools.base import Tool
from tests.fakes.openai_server import FakeToolCall, Reply, act
from tests.fakes.scripted_model import Harness
from tests.fakes.tools import Gate

ZERO_USAGE = {
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "total_tokens": 0,
    "cached_tokens": 0,
    "llm_calls": 0,
    "estimated_calls": 0,
}
CUT_BY_RESTART = "Not completed: the server running this call stopped before it finished."


@pytest.fixture
def harness() -> Harness:
    return Harness()


async def test_a_dead_runs_open_calls_are_closed_from_the_conversation(harness: Harness):
    answered = ToolCall("c1", "echo", '{"text": "a"}')
    started = ToolCall("c2", "get_current_time", "{}")
    question = ToolCall("c3", "request_input", '{"question": "Which city?"}')
    earlier = ToolCall("c0", "echo", "{}")  # another run's: not this recovery's business
    history = [
        Message("assistant", "", tool_calls=(earlier,), phase="act", run_id="r0"),
        Message("user", "go", run_id="r1"),
        Message("assistant", "I will look.", phase="reason", run_id="r1"),
        Message("assistant", "", tool_calls=(answered, started, question), run_id="r1"),
        Message.tool_result(answered, "a", status="ok", run_id="r1"),
    ]
    await close_interrupted(harness.context(run_id="r1"), history, 2)
    # Its two model calls are known from its two stored assistant messages; their tokens
    # died with the process, so they are estimated: the conversation before each as its
    # prompt, the message as its completion.
    tokens = [message_tokens(EstimatedCounter(), m) for m in history]
    usage = {
        "prompt_tokens": sum(tokens[:2]) + sum(tokens[:3]),
        "completion_tokens": tokens[2] + tokens[3],
        "total_tokens": sum(tokens[:2]) + sum(tokens[:3]) + tokens[2] + tokens[3],
        "cached_tokens": 0,
        "llm_calls": 2,
        "estimated_calls": 2,
    }
    assert harness.record.events == [
        ToolFailed(2, "c2", "get_current_time", CUT_BY_RESTART),
        RunStopped(2, "interrupted", usage),
    ]
    results = [m for m in harness.record.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.status) for m in results] == [("c2", "stopped"), ("c3", "stopped")]
    assert all("server running" in m.content for m in results)
    (note,) = [m for m in harness.record.messages if m.phase == "stop"]
    assert note.role == "system" and "step 2" in note.content and note.run_id == "r1"


async def test_a_stop_before_the_run_began_is_recorded_at_step_zero(harness: Harness):
    ctx = harness.context()
    entered = asyncio.Event()

    async def before_the_loop() -> None:
        async with stop_recorded(ctx):
            entered.set()
            await asyncio.Event().wait()  # e.g. loading the history, until stopped

    task = asyncio.ensure_future(before_the_loop())
    harness.control.attach(task)  # type: ignore[arg-type]
    async with asyncio.timeout(5):
        await entered.wait()
    assert harness.control.request_stop("user")
    async with asyncio.timeout(5):
        await task  # ends normally: the stop is recorded, not raised
    assert not task.cancelled() and task.cancelling() == 0
    assert harness.record.events == [RunStopped(0, "user", ZERO_USAGE)]
    (note,) = harness.record.messages  # the next run's model learns this turn was stopped
    assert (note.role, note.phase) == ("system", "stop")
    assert note.content == "The user stopped the previous run before it began."


async def test_a_cancellation_without_a_stop_reason_is_not_a_stop(harness: Harness):
    ctx = harness.context()
    entered = asyncio.Event()

    async def body() -> None:
        async with stop_recorded(ctx):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(body())
    async with asyncio.timeout(5):
        await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert harness.record.events == []


async def test_a_run_that_ends_itself_claims_the_stop(harness: Harness):
    ctx = harness.context()
    async with stop_recorded(ctx):
        raise RunInterrupted("input_timeout")
    assert harness.control.stop_reason == "input_timeout"
    assert not harness.control.request_stop("user")  # a later stop finds one under way
    assert harness.record.events == [RunStopped(0, "input_timeout", ZERO_USAGE)]


async def test_a_stop_before_the_task_is_attached_cancels_it_at_attach():
    control = RunControl()
    assert control.request_stop("user")  # before the run's task exists, or has begun
    reached = asyncio.Event()

    async def run() -> None:
        control.attach(asyncio.current_task())  # type: ignore[arg-type]
        reached.set()
        await asyncio.sleep(10)  # the first wait: the stop lands here

    task = asyncio.create_task(run())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert reached.is_set() and task.cancelled()


async def test_a_stop_shows_a_call_that_ended_behind_a_slower_one_with_its_result():
    """Results are shown in the model's order, so a quick call's end waits behind a slow one;
    a stop then must show the quick call's real result, not report it as not completed."""
    slow = Gate("slow")

    class QuickArgs(BaseModel):
        pass

    async def quick(args: QuickArgs, context: ToolContext) -> dict[str, str]:
        # The user presses stop the moment this call ends (while the slow one still runs).
        assert harness.control.request_stop("user")
        return {"time": "noon"}

    harness = Harness(tools=[slow.tool, Tool("quick", "Answer at once.", QuickArgs, quick)])
    calls = [FakeToolCall("slow", {"label": "a"}), FakeToolCall("quick", {})]
    harness.model.script("act", act(*calls))
    async with asyncio.timeout(10):
        await harness.start("go")
    ends = [e for e in harness.record.events if isinstance(e, ToolCompleted | ToolFailed)]
    assert [(type(e).__name__, e.call_id) for e in ends] == [
        ("ToolFailed", calls[0].id),  # still running: not completed
        ("ToolCompleted", calls[1].id),  # ended: its result, in the model's order
    ]
    assert isinstance(harness.record.events[-1], RunStopped)
    results = {m.tool_call_id: m for m in harness.record.messages if m.role == "tool"}
    assert results[calls[1].id].status == "ok" and "noon" in results[calls[1].id].content
    assert results[calls[0].id].status == "stopped"
    assert slow.cancelled.is_set()


async def test_a_chat_reply_stopped_midway_is_not_said_to_have_never_begun(harness: Harness):
    # Chat-mode runs have no steps: "before it began" told the next run's model that the
    # reply it had half written was never started.
    harness.model.script("chat", Reply(chunks=["Five words streamed ", "so far"], hang_after=1))
    task = harness.start("talk", agent=False)
    async with asyncio.timeout(5):
        await harness.model.hanging.wait()
    assert harness.control.request_stop("user")
    async with asyncio.timeout(5):
        await task
    (note,) = [m for m in harness.record.messages if m.phase == "stop"]
    assert note.content == "The user stopped the previous run before it finished."
