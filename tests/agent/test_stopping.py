"""A run cut short is closed the same way whether it was stopped, ended itself, or was left
open by a process that died: through its ports only, no server."""

from __future__ import annotations

import pytest

from agent.events import RunStopped, ToolFailed
from agent.messages import Message, ToolCall
from agent.stopping import close_interrupted
from tests.fakes.scripted_model import Harness

ZERO_USAGE = {
    "prompt_tokens": 0,
    "completion_tokens": 0,
    "total_tokens": 0,
    "cached_tokens": 0,
    "llm_calls": 0,
}
CUT_BY_RESTART = "Not completed: the server restarted before this call finished."


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
    assert harness.record.events == [
        ToolFailed(2, "c2", "get_current_time", CUT_BY_RESTART),
        RunStopped(2, "interrupted", ZERO_USAGE),
    ]
    results = [m for m in harness.record.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.status) for m in results] == [("c2", "stopped"), ("c3", "stopped")]
    assert all("restarted" in m.content for m in results)
    (note,) = [m for m in harness.record.messages if m.phase == "stop"]
    assert note.role == "system" and "step 2" in note.content and note.run_id == "r1"
