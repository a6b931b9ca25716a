"""A whole agent run over the real socket: phases, order, fields, seq, tool events, limits.

The loop's own logic (phase order, limits, free text) is tested in-process, faster, in
tests/agent/test_loop.py."""

from __future__ import annotations

import json

from agent.ports import ToolContext
from agent.tools.base import Tool
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason, text
from tests.fakes.tools import EchoArgs, echo_tool


def kinds(frames: list[dict]) -> list[str]:
    return [kind(f) for f in frames]


async def test_a_run_streams_every_phase_in_order_with_tool_events(server, fake_llm: FakeLLM):
    call = FakeToolCall("get_current_time", {"timezone": "Europe/Paris"})
    fake_llm.script("reason", reason("I'll check the time in Paris."))
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("It is daytime there.", final="It is **noon** in Paris."))
    async with await server.client() as c:
        session = await c.recv()
        frames = await c.run("What time is it in Paris?", agent_max_steps=3)

    assert kinds(frames) == [
        "agent_user_message",  # the run's first event: a replay alone rebuilds the chat
        "agent_start",
        "agent_turn_start",
        "agent_reason_delta",
        "agent_reason_delta",
        "agent_reason",
        "tool_start",
        "tool_complete",
        "agent_observe_delta",
        "agent_observe_delta",
        "agent_observe",
        "agent_answer_delta",
        "agent_completion",
        "response_complete",
    ]
    assert frames[-3]["delta"] == frames[-2]["final_answer"]  # every answer arrives as deltas
    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
    run_id = frames[0]["run_id"]
    for f in frames:
        assert f["session_id"] == session["session_id"]
        assert f["run_id"] == run_id
        assert isinstance(f["ts"], int) and f["ts"] > 1_600_000_000_000
    assert frames[0]["content"] == "What time is it in Paris?" and frames[0]["agent_mode"]
    assert frames[0]["origin"] == "chat" and "id" not in frames[0]
    assert frames[1]["max_steps"] == 3
    assert frames[2]["step"] == 1
    reason_deltas = "".join(f["delta"] for f in frames if kind(f) == "agent_reason_delta")
    reason_done = next(f for f in frames if kind(f) == "agent_reason")
    assert reason_done["content"] == "I'll check the time in Paris."
    assert reason_deltas.strip() == reason_done["content"]
    assert "{" not in reason_deltas and "```" not in reason_deltas
    start = next(f for f in frames if kind(f) == "tool_start")
    assert start["tool_call_id"] == call.id
    assert start["tool_name"] == "get_current_time"
    assert start["arguments"] == {"timezone": "Europe/Paris"}
    done = next(f for f in frames if kind(f) == "tool_complete")
    assert done["tool_call_id"] == call.id and done["step"] == 1
    assert done["result"]["timezone"] == "Europe/Paris"
    assert isinstance(done["duration_ms"], int)
    observed = next(f for f in frames if kind(f) == "agent_observe")
    assert observed["content"] == "It is daytime there."
    completion = frames[-2]
    assert completion["final_answer"] == "It is **noon** in Paris."
    assert completion["stop_reason"] == "finished"
    assert completion["steps"] == 1
    assert completion["usage"]["total_tokens"] == 45  # three calls of 10 + 5 tokens
    assert frames[-1] == {
        "type": "response_complete",
        "session_id": session["session_id"],
        "run_id": run_id,
        "seq": frames[-1]["seq"],
        "ts": frames[-1]["ts"],
    }


async def test_llm_requests_carry_gateway_headers_and_phase_inputs(server, fake_llm: FakeLLM):
    fake_llm.script("act", act(FakeToolCall("get_current_time", {})))
    fake_llm.script("observe", observe("ok", final="done"))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        frames = await c.run("time?")
    run_id = frames[0]["run_id"]
    assert fake_llm.phases() == ["reason", "act", "observe"]
    for recorded, phase in zip(fake_llm.requests, ["reason", "act", "observe"], strict=True):
        assert recorded.headers["x-agent-session"] == session
        assert recorded.headers["x-agent-run"] == run_id
        assert recorded.headers["x-agent-step"] == "1"
        assert recorded.headers["x-agent-phase"] == phase
        assert recorded.body["stream"] is True
        systems = [m for m in recorded.body["messages"] if m["role"] == "system"]
        assert len(systems) == 1 and recorded.body["messages"][0]["role"] == "system"
    # Reason and Act show the same tools (a cacheable prefix), Observe none. Act asks as a
    # plain tool loop does (tool_choice unset, no schema: docs/models.md); Reason and Observe
    # have their JSON schemas; every phase has a bound and, with no temperature configured,
    # the agent's own.
    reason_body, act_body, observe_body = (r.body for r in fake_llm.requests)
    assert reason_body["tool_choice"] == "none"
    assert "tool_choice" not in act_body and "response_format" not in act_body
    assert reason_body["response_format"]["json_schema"]["name"] == "think"
    assert observe_body["response_format"]["json_schema"]["name"] == "look"
    assert [b["max_tokens"] for b in (reason_body, act_body, observe_body)] == [1024, 1024, 2048]
    assert {b["temperature"] for b in (reason_body, act_body, observe_body)} == {0.2}
    assert reason_body["tools"] == act_body["tools"]
    assert "tools" not in observe_body and "tool_choice" not in observe_body
    offered = {t["function"]["name"] for t in act_body["tools"]}
    assert offered == {"get_current_time", "request_input"}
    observe_messages = fake_llm.requests[2].body["messages"]
    assert [m["role"] for m in observe_messages[-2:]] == ["tool", "user"]  # the instruction last
    assert json.loads(observe_messages[-2]["content"])["timezone"] == "UTC"
    assert "look at the results" in observe_messages[-1]["content"]


async def test_failed_tool_calls_reach_the_wire_and_the_model(server_factory, fake_llm):
    # Which calls fail and why is loop logic (tests/agent/test_loop.py); this checks the wire.
    calls = [
        FakeToolCall("get_current_time", '{"timezone": "UTC"'),
        FakeToolCall("echo", {"text": "crash"}),
    ]
    fake_llm.script("act", act(*calls))
    fake_llm.script("observe", observe("Both failed.", final="I could not do it."))
    async with server_factory(
        extra_tools=[echo_tool], tools={"enabled": ["get_current_time", "echo"]}
    ) as srv:
        async with await srv.client() as c:
            await c.recv()
            frames = await c.run("break things")
    tool_frames = [f for f in frames if f["type"].startswith("tool_")]
    assert [f["type"] for f in tool_frames] == ["tool_start"] * 2 + ["tool_error"] * 2
    assert [f["tool_call_id"] for f in tool_frames[2:]] == [c.id for c in calls]
    assert tool_frames[0]["arguments"] == {}  # unreadable JSON is shown as no arguments
    assert "failed unexpectedly" in tool_frames[3]["error"]
    assert "Traceback" not in tool_frames[3]["error"]
    assert frames[-2]["stop_reason"] == "finished"
    observe_request = [r for r in fake_llm.requests if r.phase == "observe"][-1]
    tool_messages = [m for m in observe_request.body["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [c.id for c in calls]
    assert all(m["content"].startswith("The tool call failed") for m in tool_messages)


async def test_concurrent_tool_calls_run_together_and_each_reports_as_it_ends(
    server_factory, fake_llm
):
    # The fast call's tool_complete used to wait for the slow one before it (issue 46).
    slow, fast = (
        FakeToolCall("echo", {"text": "slow", "delay_ms": 300}),
        FakeToolCall("echo", {"text": "fast"}),
    )
    fake_llm.script("act", act(slow, fast))
    fake_llm.script("observe", observe("Both done.", final="ok"))
    async with server_factory(extra_tools=[echo_tool], tools={"enabled": ["echo"]}) as srv:
        async with await srv.client() as c:
            await c.recv()
            frames = await c.run("two things")
    tool_frames = [(f["type"], f["tool_call_id"]) for f in frames if f["type"].startswith("tool_")]
    assert tool_frames == [
        ("tool_start", slow.id),
        ("tool_start", fast.id),
        ("tool_complete", fast.id),
        ("tool_complete", slow.id),
    ]
    # Each completion carries its own call's duration (the figures themselves: make bench).
    completes = [f for f in frames if kind(f) == "tool_complete"]
    assert all(isinstance(f["duration_ms"], int) for f in completes)
    results = {f["tool_call_id"]: f["result"] for f in completes}
    assert results[fast.id] != results[slow.id]  # each call's own result, not a shared one


async def test_chat_mode_streams_plain_chat_and_can_use_tools(server, fake_llm: FakeLLM):
    fake_llm.script(
        "chat",
        Reply(chunks=["Let me check. "], tool_calls=[FakeToolCall("get_current_time", {})]),
        text("It is ", "noon."),
    )
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("time?", agent_mode=False)
    assert kinds(frames) == [
        "agent_user_message",
        "chat_delta",
        "tool_start",
        "tool_complete",
        "chat_delta",
        "chat_delta",
        "chat_response",
        "response_complete",
    ]
    assert frames[0]["agent_mode"] is False
    assert frames[2]["step"] == 0
    assert frames[-2]["content"] == "Let me check. It is noon."
    assert fake_llm.phases() == ["chat", "chat"]
    assert all(r.headers["x-agent-step"] == "0" for r in fake_llm.requests)


async def test_the_default_mode_comes_from_config(server_factory, fake_llm: FakeLLM):
    async with server_factory(agent={"default_mode": False}) as srv:
        async with await srv.client() as c:
            await c.recv()
            frames = await c.run("hi")
    assert kinds(frames)[-2:] == ["chat_response", "response_complete"]


async def test_tools_field_limits_the_offered_tools(server, fake_llm: FakeLLM):
    async with await server.client() as c:
        await c.recv()
        await c.run("hi", tools=[])
    offered = {t["function"]["name"] for t in fake_llm.requests[1].body["tools"]}
    assert offered == {"request_input"}


async def test_a_tool_left_out_of_the_chat_is_not_run_when_the_model_calls_it(
    server_factory, fake_llm: FakeLLM
):
    """`tools` is a permission, not a hint: a model that calls a tool it was not offered (it
    saw it earlier in the conversation) gets a tool error and the tool never runs."""
    ran: list[str] = []

    async def spy(args: EchoArgs, context: ToolContext) -> dict[str, str]:
        ran.append(args.text)
        return {"echo": args.text}

    spy_tool = Tool("echo", "Echo the text back.", EchoArgs, spy)
    fake_llm.script("act", act(FakeToolCall("echo", {"text": "hi"})))
    fake_llm.script("observe", observe("Refused.", final="I could not use it."))
    fake_llm.script("chat", Reply(tool_calls=[FakeToolCall("echo", {"text": "hi"})]), text("No."))
    async with server_factory(
        extra_tools=[spy_tool], tools={"enabled": ["get_current_time", "echo"]}
    ) as srv:
        async with await srv.client() as c:
            await c.recv()
            agent = await c.run("echo hi", tools=["get_current_time"])
            chat = await c.run("echo hi", tools=[], agent_mode=False)
    for frames in (agent, chat):
        errors = [f for f in frames if f["type"] == "tool_error"]
        assert [e["tool_name"] for e in errors] == ["echo"]
        assert errors[0]["error"] == (
            "echo is not available now: it was not chosen for this conversation, "
            "or its MCP server is not running."
        )
        assert not any(f["type"] == "tool_complete" for f in frames)
    assert ran == []


async def test_a_second_run_sees_the_first_runs_answer(server, fake_llm: FakeLLM):
    fake_llm.script("observe", observe("ok", final="The answer is Lisbon."))
    async with await server.client() as c:
        await c.recv()
        await c.run("first question")
        await c.run("second question")
    second_reason = [r for r in fake_llm.requests if r.phase == "reason"][1]
    contents = [(m["role"], m["content"]) for m in second_reason.body["messages"][1:]]
    assert ("user", "first question") in contents
    assert ("assistant", "The answer is Lisbon.") in contents
    assert contents[-1][0] == "user" and contents[-1][1].startswith("second question\n\n")
