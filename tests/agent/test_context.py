"""ContextWindow: cut big results, slide the window over earlier runs, collapse old steps,
and never separate a tool call from its result."""

from __future__ import annotations

from agent.context import ContextLimits, ContextWindow, recall
from agent.messages import Message, ToolCall
from agent.tokens import EstimatedCounter, message_tokens

COUNTER = EstimatedCounter()


def _run(run_id: str, task: str, steps: int, result: str = "ok") -> list[Message]:
    out = [Message("user", task, run_id=run_id)]
    for step in range(steps):
        call = ToolCall(f"{run_id}-c{step}", "lookup", '{"q": "x"}')
        out += [
            Message(
                "assistant",
                f"Step {step}: I will look it up. More words here.",
                phase="reason",
                run_id=run_id,
            ),
            Message("assistant", "", tool_calls=(call,), phase="act", run_id=run_id),
            Message(
                "tool", result, tool_call_id=call.id, tool_name="lookup", status="ok", run_id=run_id
            ),
            Message(
                "assistant",
                f"Found it in step {step}. Details follow.",
                phase="observe",
                run_id=run_id,
            ),
        ]
    out.append(Message("assistant", f"Answer of {run_id}.", phase="final", run_id=run_id))
    return out


def _tokens(messages: list[Message]) -> int:
    """The exact size (a report of a list that fits by bytes holds only an upper bound)."""
    return sum(message_tokens(COUNTER, m) for m in messages)


def _pairs_are_whole(messages: list[Message]) -> bool:
    calls = {c.id for m in messages for c in m.tool_calls}
    results = {m.tool_call_id for m in messages if m.role == "tool"}
    return calls == results


def test_everything_fits_nothing_changes():
    window = ContextWindow(COUNTER, ContextLimits(window_tokens=100_000))
    conversation = _run("a", "first", 2) + _run("b", "second", 1)
    messages, report = window.build("sys", conversation, "b")
    assert not report.changed and report.tokens > 0
    assert messages[0].role == "system" and messages[-1].content == "Answer of b."


def test_a_large_result_is_cut_with_a_marker_and_recall_brings_it_back():
    big = "\n".join(f"line {i}: value {i * 7}" for i in range(2000))
    conversation = _run("a", "task", 1, result=big)
    window = ContextWindow(COUNTER, ContextLimits(window_tokens=100_000, tool_result_tokens=200))
    messages, report = window.build("sys", conversation, "a")
    tool = next(m for m in messages if m.role == "tool")
    assert 'recall_details with result_id "a-c0"' in tool.content
    assert COUNTER.count(tool.content) < 400
    assert report.compressed == [
        {"result_id": "a-c0", "tokens": COUNTER.count(big), "kept_tokens": 200}
    ]
    assert recall(conversation, "a-c0", None).startswith("line 0: value 0")
    assert recall(conversation, "a-c0", "line 1999:") == "line 1999: value 13993"


def test_earlier_runs_slide_out_oldest_first():
    conversation = _run("a", "oldest", 3) + _run("b", "middle", 3) + _run("c", "now", 1)
    full = ContextWindow(COUNTER, ContextLimits(window_tokens=100_000))
    size = _tokens(full.build("sys", conversation, "c")[0])
    tight = ContextWindow(COUNTER, ContextLimits(window_tokens=size - 50, reserve_tokens=0))
    messages, report = tight.build("sys", conversation, "c")
    contents = [m.content for m in messages]
    assert "oldest" not in contents and "middle" in contents and "now" in contents
    # Earlier runs are sent without their reasoning/observations: task, 3 calls, 3 results,
    # the final answer.
    assert report.dropped_messages == 8
    assert report.tokens <= size - 50 and _pairs_are_whole(messages)


def test_old_steps_of_the_current_run_collapse_to_one_line():
    conversation = _run("a", "long task", 8, result="some data " * 40)
    full = ContextWindow(COUNTER, ContextLimits(window_tokens=100_000))
    size = _tokens(full.build("sys", conversation, "a")[0])
    budget = int(size * 0.6)
    tight = ContextWindow(
        COUNTER, ContextLimits(window_tokens=budget, reserve_tokens=0, keep_recent_steps=2)
    )
    messages, report = tight.build("sys", conversation, "a")
    summaries = [m for m in messages if m.phase == "summary"]
    assert report.collapsed_steps == len(summaries) >= 1
    assert summaries[0].content.startswith("[Earlier step, summarized] Thought: Step 0:")
    assert "lookup(" in summaries[0].content and "→ ok" in summaries[0].content
    assert messages[1].content == "long task"  # the task is never collapsed
    reasons = [m.content for m in messages if m.phase == "reason"]
    assert reasons[-2:] == [
        "Step 6: I will look it up. More words here.",
        "Step 7: I will look it up. More words here.",
    ]
    assert report.tokens <= budget and _pairs_are_whole(messages)


class _CountingCounter:
    exact = True

    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return COUNTER.count(text)


def test_a_conversation_that_fits_by_bytes_is_not_counted():
    counter = _CountingCounter()
    window = ContextWindow(counter, ContextLimits(window_tokens=100_000))
    conversation = _run("a", "first", 2) + _run("b", "second", 1)
    messages, report = window.build("sys", conversation, "b")
    assert counter.calls == 0 and not report.changed and not report.exact
    assert report.tokens >= sum(len(m.content.encode()) for m in messages)
    counted, _ = ContextWindow(COUNTER, ContextLimits(window_tokens=100_000)).build(
        "sys", conversation, "b", window_tokens=10**9
    )
    assert messages == counted


def test_a_conversation_too_big_by_bytes_is_counted_and_kept_when_tokens_fit():
    conversation = _run("a", "task " * 300, 1)
    size = sum(len(m.content.encode()) for m in conversation)
    counter = _CountingCounter()
    window = ContextWindow(counter, ContextLimits(window_tokens=size, reserve_tokens=0))
    messages, report = window.build("sys", conversation, "a")
    assert counter.calls > 0 and report.exact
    assert not report.changed and len(messages) == len(conversation) + 1
