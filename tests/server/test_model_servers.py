"""What real model servers do, through the whole server: the request shape strict servers
accept, calls written as text, reasoning models, small context windows, prompt caching, and
the final answer streaming as it is written."""

from __future__ import annotations

import json

from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, Reply, act, observe, reason, text


async def test_every_request_has_the_shape_strict_templates_accept(server, fake_llm: FakeLLM):
    from tests.fakes.openai_server import FakeToolCall

    fake_llm.script("act", act(FakeToolCall("get_current_time", {})))
    fake_llm.script("observe", observe("Still looking."), observe("ok", final="Noon."))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time?", agent_max_steps=3)
        await c.run("and again?")
    assert fake_llm.refusals == []  # nothing was refused by the strict fake
    assert not [f for f in frames if f["type"] == "error"]
    for request in fake_llm.requests:
        assert request.body["messages"][-1]["role"] in ("user", "tool"), request.phase
    # The prefix is shared: the same system message on every call of the run, and the same
    # tools for Reason and Act (Observe is sent none: docs/models.md).
    run_calls = [r for r in fake_llm.requests if r.phase in ("reason", "act", "observe")]
    assert len({r.body["messages"][0]["content"] for r in run_calls}) == 1
    with_tools = [r for r in run_calls if r.phase != "observe"]
    assert len({json.dumps(r.body["tools"]) for r in with_tools}) == 1
    assert not [r for r in run_calls if r.phase == "observe" and "tools" in r.body]


async def test_a_tool_call_written_as_text_is_run_like_a_native_one(server, fake_llm: FakeLLM):
    written = '<tool_call>\n{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}'
    fake_llm.script("act", text(written + "\n</tool_call>"))
    fake_llm.script("observe", observe("Got it.", final="It is evening in Tokyo."))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time in Tokyo?")
    start = next(f for f in frames if f["type"] == "tool_start")
    assert start["tool_name"] == "get_current_time"
    assert start["arguments"] == {"timezone": "Asia/Tokyo"}
    assert any(f["type"] == "tool_complete" for f in frames)
    observe_request = next(r for r in fake_llm.requests if r.phase == "observe")
    calls = [m for m in observe_request.body["messages"] if m.get("tool_calls")]
    assert calls[-1]["tool_calls"][0]["id"] == start["tool_call_id"]  # recorded as native
    assert "<tool_call>" not in calls[-1]["content"]


async def test_a_text_call_of_a_tool_not_offered_stays_text(server, fake_llm: FakeLLM):
    fake_llm.script("act", text('{"name": "delete_everything", "arguments": {}}'))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("clean up")
    assert not [f for f in frames if f["type"] == "tool_start"]


async def test_reasoning_is_shown_apart_and_never_sent_back(server, fake_llm: FakeLLM):
    fake_llm.script(
        "reason",
        Reply(
            reasoning=["The user wants ", "the time."],
            chunks=["<think>hidden plan</think>", "I'll check.", '\n{"plan": "p", "finish": true}'],
        ),
    )
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time?")
    thinking = "".join(f["delta"] for f in frames if kind(f) == "agent_reasoning_delta")
    assert thinking == "The user wants the time.hidden plan"
    reasoned = next(f for f in frames if kind(f) == "agent_reason")
    assert reasoned["content"] == "I'll check."
    later = [r for r in fake_llm.requests if r.phase == "observe"][0]
    sent = json.dumps(later.body["messages"])
    assert "hidden plan" not in sent and "The user wants" not in sent


async def test_a_context_overflow_compacts_once_and_retries(server_factory, fake_llm: FakeLLM):
    overflow = {
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
        "n_ctx": 4096,
    }
    fake_llm.script("reason", _error(400, overflow), reason("Fine now.", finish=True))
    async with server_factory() as s, await s.client() as c:
        await c.recv()
        frames = await c.run("hi")
    assert not [f for f in frames if f["type"] == "error"]
    assert frames[-2]["update_type"] == "agent_completion"
    assert [r.phase for r in fake_llm.requests][:2] == ["reason", "reason"]


async def test_a_context_that_stays_too_small_fails_with_a_clear_error(server, fake_llm):
    overflow = {"message": "This model's maximum context length is 4096 tokens", "n_ctx": 4096}
    fake_llm.script("reason", _error(400, overflow), _error(400, overflow))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hi")
    error = next(f for f in frames if f["type"] == "error")
    assert error["code"] == "llm_error"
    assert "context window (4096 tokens)" in error["message"]
    assert "--ctx-size" in error["message"]


async def test_cached_prompt_tokens_are_reported_in_usage(server, fake_llm: FakeLLM):
    fake_llm.script("reason", reason("ok", finish=True, prompt_tokens=100, cached_tokens=80))
    fake_llm.script("observe", observe("done", final="Hi.", prompt_tokens=120, cached_tokens=100))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hi")
    usage = frames[-2]["usage"]
    assert usage["prompt_tokens"] == 220 and usage["cached_tokens"] == 180


async def test_the_final_answer_streams_and_code_blocks_survive(server, fake_llm: FakeLLM):
    answer = 'Run this:\n```python\nprint("```")\n```\n| a | b |\n|---|---|\n| 1 | 2 |'
    block = json.dumps({"observation": "I have it.", "should_continue": False})
    fake_llm.script(
        "observe",
        Reply(
            chunks=["I have it.\n```json\n", block, "\n```\n", answer[:20], answer[20:]],
            delay_s=0.02,  # as a model writes: pieces apart, so they are not merged
        ),
    )
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("show me")
    deltas = [f["delta"] for f in frames if kind(f) == "agent_answer_delta"]
    assert len(deltas) >= 2  # it streamed, not one lump at the end
    assert "".join(deltas).strip() == answer
    observed = next(f for f in frames if kind(f) == "agent_observe")
    assert observed["content"] == "I have it."
    shown = "".join(f.get("delta", "") for f in frames if kind(f) == "agent_observe_delta")
    assert "should_continue" not in shown
    assert frames[-2]["final_answer"] == answer
    assert [r.phase for r in fake_llm.requests].count("repair") == 0


async def test_a_json_answer_with_its_own_code_fence_is_not_shown_raw(server, fake_llm):
    final = 'Here:\n```json\n{"a": 1}\n```\nDone.'
    block = json.dumps({"observation": "ok", "should_continue": False, "final_answer": final})
    fake_llm.script("observe", text("Found it.\n```json\n", block, "\n```"))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("json please")
    shown = "".join(f.get("delta", "") for f in frames if kind(f) == "agent_observe_delta")
    assert "final_answer" not in shown
    assert frames[-2]["final_answer"] == final
    assert "".join(f["delta"] for f in frames if kind(f) == "agent_answer_delta") == final


async def test_a_small_models_key_value_block_is_read(server, fake_llm: FakeLLM):
    fake_llm.script("observe", text("observation: It is noon. should_continue: false"))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time?")
    assert frames[-2]["stop_reason"] == "finished"
    assert frames[-2]["final_answer"] == "It is noon."
    assert "repair" not in [r.phase for r in fake_llm.requests]


def _error(status: int, error: dict[str, object]) -> Reply:
    return Reply(status=status, error=dict(error))


async def test_a_summary_written_as_a_block_is_not_shown_raw(server, fake_llm: FakeLLM):
    fake_llm.script("observe", observe("More to do."))
    block = json.dumps({"observation": "It is noon in Tokyo.", "should_continue": False})
    fake_llm.script("summarize", text(block))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time?", agent_max_steps=1)
    assert frames[-2]["final_answer"] == "It is noon in Tokyo."
    shown = "".join(f["delta"] for f in frames if kind(f) == "agent_answer_delta")
    assert shown == "It is noon in Tokyo."


async def test_a_model_repeating_its_block_is_hung_up_on_and_the_run_goes_on(
    server, fake_llm: FakeLLM
):
    block = json.dumps({"plan": "Look it up.", "tools_to_consider": [], "finish": False})
    repeats = ["I'll look.\n", *[f"```json\n{block}\n```\n\n"] * 3]
    # The model keeps the stream open after its repeats: only a hang-up lets the run go on.
    fake_llm.script("reason", Reply(chunks=repeats, hang_after=len(repeats)))
    fake_llm.script("observe", observe("Found it.", final="Here it is."))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("look it up", timeout=10)
    await fake_llm.wait_disconnects(1)
    reasoned = next(f for f in frames if kind(f) == "agent_reason")
    assert reasoned["content"] == "I'll look."
    completion = next(f for f in frames if kind(f) == "agent_completion")
    assert completion["final_answer"] == "Here it is."
    assert "```" not in "".join(f.get("delta", "") for f in frames)
