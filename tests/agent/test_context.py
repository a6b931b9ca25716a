"""ContextWindow: cut big results, slide the window over earlier runs, collapse old steps,
and never separate a tool call from its result."""

from __future__ import annotations

import gc
import tracemalloc

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agent.context import ContextLimits, ContextWindow, EarlierTurns
from agent.messages import Message, ToolCall
from agent.recall import recall
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
    first = recall(conversation, "a-c0", window.piece)
    assert first.startswith("[Characters 0-") and "\nline 0: value 0\n" in first
    last = recall(conversation, "a-c0", window.piece, focus="line 1999:")
    assert last.endswith("] line 1999: value 13993")


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


class _CountingCache(dict):
    """The window's token cache, counting lookups: each is one message's tokens read."""

    lookups = 0

    def get(self, key, default=None):
        self.lookups += 1
        return super().get(key, default)


def test_a_long_session_is_fitted_in_one_pass():
    """Hundreds of earlier turns to drop: each message's tokens are read about once per call,
    not once per turn dropped (recounting made a call of a long session quadratic: 2,000
    messages cost 60 ms of event-loop time per LLM call, 4,000 cost 300 ms)."""
    conversation = [m for i in range(300) for m in _run(f"r{i}", f"task {i}", 1)]
    conversation += _run("now", "the task now", 4)
    window = ContextWindow(COUNTER, ContextLimits(window_tokens=2_000, reserve_tokens=0))
    window.build("sys", conversation, "now")  # the first call counts every message once
    window._cache = cache = _CountingCache(window._cache)
    messages, report = window.build("sys", conversation, "now")
    assert report.dropped_messages > 1_000 and report.tokens <= 2_000
    assert cache.lookups <= 3 * len(conversation)
    assert messages[1].content.startswith("task ") and _pairs_are_whole(messages)
    # A run's later calls reuse its earlier turns: only the run's own messages are read.
    earlier = EarlierTurns()
    assert window.build("sys", conversation, "now", earlier=earlier) == (messages, report)
    cache.lookups = 0
    step = _run("now", "", 1)[1:-1]
    again = window.build("sys", conversation + step, "now", earlier=earlier)
    assert cache.lookups <= 2 * len(_run("now", "", 5))
    assert again == window.build("sys", conversation + step, "now")


def _plain_fit(window, limits, system, conversation, run_id):
    """The fitting as the module doc states it, recounting the whole list after every turn
    dropped, every step collapsed or left out: what `build` must return, computed slowly."""
    from agent import context as c
    from agent import steps as s

    report = c.ContextReport(limits.window_tokens - limits.reserve_tokens, exact=True)
    head, *body = c.build_messages(system, conversation, run_id)
    body = [window._cut(m, report, window.result_tokens()) for m in body]
    first = next((i for i, m in enumerate(body) if m.run_id == run_id), len(body))
    earlier, current = body[:first], body[first:]
    fixed = _tokens([head])
    while earlier and fixed + _tokens(earlier + current) > report.budget:
        end = c._turn_end(earlier, 0)
        report.dropped_messages += end
        earlier = earlier[end:]
    steps = s.split_steps(current)

    def shown():
        out = [m for step in steps[:1] for m in step]
        if report.dropped_steps:
            out.append(s.left_out_note(report.dropped_steps, run_id))
        return [head, *earlier, *out, *(m for step in steps[1:] for m in step)]

    for keep in dict.fromkeys((limits.keep_recent_steps, 1)):
        for index in range(1, len(steps) - keep):
            if steps[index] and not s._is_summary(steps[index]):
                if _tokens(shown()) <= report.budget:
                    break
                steps[index] = [s._summarize_step(steps[index])]
                report.collapsed_steps += 1
        for index in range(1, len(steps) - keep):
            if s._is_summary(steps[index]):
                if _tokens(shown()) <= report.budget:
                    break
                steps[index] = []
                report.collapsed_steps -= 1
                report.dropped_steps += 1
    over = _tokens(shown()) - report.budget
    results = [
        (g, i) for g, step in enumerate(steps) for i, m in enumerate(step) if m.role == "tool"
    ]
    if over > 0 and results:
        sizes = sum(_tokens([steps[g][i]]) for g, i in results)
        limit = max(c._MIN_RESULT_TOKENS, (sizes - over) // len(results) - c._MARKER_TOKENS)
        for g, i in results:
            steps[g][i] = window._cut(steps[g][i], report, limit)
    messages = shown()
    report.tokens = _tokens(messages)
    return messages, report


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    earlier=st.lists(st.integers(min_value=0, max_value=4), max_size=12),
    steps=st.integers(min_value=0, max_value=8),
    result_words=st.integers(min_value=1, max_value=120),
    share=st.floats(min_value=0.05, max_value=1.2),
    keep=st.integers(min_value=1, max_value=3),
)
def test_the_running_totals_fit_like_recounting(earlier, steps, result_words, share, keep):
    conversation = [
        m
        for i, n in enumerate(earlier)
        for m in _run(f"r{i}", f"earlier task {i}", n, result="word " * result_words)
    ]
    conversation += _run("now", "the task now", steps, result="data " * result_words)
    size = _tokens(
        ContextWindow(COUNTER, ContextLimits(window_tokens=10**7)).build(
            "sys", conversation, "now", window_tokens=10**7
        )[0]
    )
    limits = ContextLimits(
        window_tokens=max(200, int(size * share)), reserve_tokens=0, keep_recent_steps=keep
    )
    window = ContextWindow(_CountingCounter(), limits)  # "exact": a fitted report says so
    built = window.build("sys", conversation, "now")
    assume(built[1].exact)  # it did not fit by bytes, so it went through the fitting
    assert built == _plain_fit(window, limits, "sys", conversation, "now")
    # The same, call by call as the run grows, with the earlier turns kept between calls.
    earlier = EarlierTurns()
    start = next(i for i, m in enumerate(conversation) if m.run_id == "now")
    for end in range(start + 1, len(conversation) + 1, 3):
        grown = conversation[:end]
        fresh = window.build("sys", grown, "now")
        assert window.build("sys", grown, "now", earlier=earlier) == fresh
        if fresh[1].exact:
            assert fresh == _plain_fit(window, limits, "sys", grown, "now")


def test_earlier_turns_are_built_again_for_another_conversation():
    """Kept turns are reused only while the conversation still begins with the very same
    messages and goes on with the run."""
    window = ContextWindow(COUNTER, ContextLimits(window_tokens=100_000))
    earlier = EarlierTurns()
    same_shape = [_run("x", "first", 1), _run("x", "second", 1), _run("y", "third", 2)]
    for before in same_shape:
        conversation = before + _run("now", "task", 1)
        fresh = window.build("sys", conversation, "now")
        assert window.build("sys", conversation, "now", earlier=earlier) == fresh
    other_run = same_shape[0] + _run("later", "task", 1)
    fresh = window.build("sys", other_run, "later")
    assert window.build("sys", other_run, "later", earlier=earlier) == fresh
    # The same first messages, but what follows them is not where the run begins (a window
    # that fits nothing whole: which turns are earlier ones decides what is dropped).
    before = same_shape[0]
    tight = ContextWindow(COUNTER, ContextLimits(window_tokens=100, reserve_tokens=0))
    for conversation, run_id in [
        (before + _run("z", "between", 1) + _run("now", "task", 1), "now"),
        (before + _run("x", "more of x", 1), "x"),
    ]:
        earlier = EarlierTurns()
        tight.build("sys", before + _run("now", "task", 1), "now", earlier=earlier)
        fresh = tight.build("sys", conversation, run_id)
        assert tight.build("sys", conversation, run_id, earlier=earlier) == fresh


def test_a_result_cut_once_is_not_counted_again_at_the_next_call():
    """Every call of a run sends its results again; cutting a large one counts its tokens
    about fifteen times (five 230 KB results took 80 ms per call), so a cut is kept."""
    big = "\n".join(f"line {i}: value {i * 7}" for i in range(3000))
    conversation = _run("a", "earlier", 1, result=big) + _run("now", "task", 3, result=big)
    counter = _CountingCounter()
    window = ContextWindow(counter, ContextLimits(window_tokens=100_000, tool_result_tokens=200))
    earlier = EarlierTurns()
    first = window.build("sys", conversation, "now", earlier=earlier)
    assert len(first[1].compressed) == 4 and counter.calls > 4
    counter.calls = 0
    assert window.build("sys", conversation, "now", earlier=earlier) == first
    assert counter.calls == 0


def test_the_window_keeps_no_counted_message_alive():
    """Its caches are keyed by digests: a process that counted many large results must not
    hold their text (only the heads of the results it cut lately)."""
    window = ContextWindow(COUNTER, ContextLimits(window_tokens=4_000, reserve_tokens=0))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        conversation = [
            m
            for i in range(12)
            for m in _run(f"r{i}", f"task {i}", 1, result=f"{i} " + "page text " * 10_000)
        ] + _run("now", "the task now", 0)
        messages, report = window.build("sys", conversation, "now")
        assert report.compressed and report.dropped_messages
        del conversation, messages
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 400_000  # the 12 results were 1.2 MB; their cut heads are ~0.2 MB
