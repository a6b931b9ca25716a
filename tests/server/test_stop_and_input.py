"""Stop in every phase, request_input answered / timed out / stopped, and what gets stored."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason
from tests.fakes.tools import Gate


async def _messages(address: str, session_id: str) -> list[dict]:
    async with httpx.AsyncClient(base_url=f"http://{address}") as http:
        body = (await http.get(f"/api/sessions/{session_id}/messages?limit=500")).json()
    return body["messages"]


async def test_stop_during_a_reason_stream_ends_the_run_at_once(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(chunks=["Thinking ", "very ", "slowly"], hang_after=2))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "take your time"})
        await c.until(lambda f: kind(f) == "agent_reason_delta" and "very" in f["delta"])
        await c.send({"type": "agent_control", "action": "stop"})
        frames = await c.until("response_complete")
        assert [kind(f) for f in frames] == ["agent_stopped", "response_complete"]
        assert frames[0]["step"] == 1 and frames[0]["reason"] == "user"
        await fake_llm.wait_disconnects(1)  # the LLM request was aborted

        messages = await _messages(server.address, session)
        assert [(m["role"], m.get("phase"), m.get("status")) for m in messages] == [
            ("user", None, None),
            ("assistant", "reason", "stopped"),
            ("system", "stop", None),
        ]
        assert messages[1]["content"] == "Thinking very"

        fake_llm.script("observe", observe("ok", final="Back again."))
        frames = await c.run("continue please")
        assert frames[-2]["final_answer"] == "Back again."
    next_reason = [r for r in fake_llm.requests if r.phase == "reason"][1]
    notes = [m["content"] for m in next_reason.body["messages"] if m["role"] == "user"]
    assert any("stopped the previous run" in n for n in notes)


async def test_a_stop_sent_with_the_chat_stops_that_run_and_frees_the_session(
    server, fake_llm: FakeLLM
):
    async with await server.client() as c:
        await c.recv()
        # The first chat of a new session, too: it has its history at hand, so nothing
        # waits between the chat and the model call but the stop itself.
        await c.ws.send(json.dumps({"type": "chat", "content": "hello"}))
        await c.ws.send(json.dumps({"type": "agent_control", "action": "stop"}))
        frames = await c.until("response_complete", timeout=5)
        assert [(kind(f), f.get("step")) for f in frames] == [
            ("agent_user_message", None),
            ("agent_stopped", 0),
            ("response_complete", None),
        ]
        assert frames[1]["usage"]["llm_calls"] == 0 and not fake_llm.requests
        await c.run("first, to the end")
        for _ in range(3):  # the stop reaches the server before the run's task has begun
            await c.send({"type": "chat", "content": "never mind"})
            await c.send({"type": "agent_control", "action": "stop"})
            frames = await c.until("response_complete", timeout=5)
            assert [kind(f) for f in frames] == [
                "agent_user_message",
                "agent_stopped",
                "response_complete",
            ]
            assert frames[0]["content"] == "never mind"
            assert frames[1]["reason"] == "user"
        fake_llm.script("observe", observe("ok", final="Still here."))
        frames = await c.run("and now?")  # the session and the tenant's run count are free
        assert frames[-2]["final_answer"] == "Still here."


async def test_stop_during_a_tool_call_cancels_it_and_closes_the_call(server_factory, fake_llm):
    gate = Gate()
    call = FakeToolCall("wait_for_gate", {"label": "x"})
    fake_llm.script("act", act(call))
    async with server_factory(extra_tools=[gate.tool], tools={"enabled": ["wait_for_gate"]}) as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            await c.send({"type": "chat", "content": "wait"})
            await c.until("tool_start")
            await asyncio.wait_for(gate.started.wait(), 5)
            await c.send({"type": "agent_control", "action": "stop"})
            frames = await c.until("response_complete")
            await asyncio.wait_for(gate.cancelled.wait(), 5)
            assert [kind(f) for f in frames] == ["tool_error", "agent_stopped", "response_complete"]
            assert frames[0]["tool_call_id"] == call.id
            assert "stopped" in frames[0]["error"]
            messages = await _messages(s.address, session)
            tool = [m for m in messages if m["role"] == "tool"]
            assert len(tool) == 1 and tool[0]["tool_call_id"] == call.id
            assert tool[0]["status"] == "stopped"
            # The conversation is valid for the API: the next run's requests carry the result.
            await c.run("again")
    act_request = [r for r in fake_llm.requests if r.phase == "act"][-1]
    ids = [m.get("tool_call_id") for m in act_request.body["messages"] if m["role"] == "tool"]
    assert ids == [call.id]


async def test_stop_during_act_and_observe(server, fake_llm: FakeLLM):
    for phase in ("act", "observe"):
        fake_llm.script(phase, Reply(chunks=["..."], hang_after=0))
        async with await server.client() as c:
            await c.recv()
            await c.send({"type": "chat", "content": f"stop in {phase}"})
            await fake_llm.wait_for(phase)
            await c.send({"type": "agent_control", "action": "stop"})
            frames = await c.until("response_complete")
            assert [kind(f) for f in frames][-2:] == ["agent_stopped", "response_complete"]
    await fake_llm.wait_disconnects(2)


async def test_request_input_pauses_until_the_answer_which_becomes_the_tool_result(
    server, fake_llm: FakeLLM
):
    ask = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script("act", act(ask))
    fake_llm.script("observe", observe("Got it.", final="Lyon it is."))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "weather please"})
        frames = await c.until("agent_request_input")
        question = frames[-1]
        assert question["question"] == "Which city?"
        assert question["tool_call_id"] == ask.id and question["step"] == 1
        assert question["expires_at"] > question["ts"]
        assert not any(f["type"].startswith("tool_") for f in frames)

        async with await server.client(session_id=session) as other:
            hello = await other.recv()
            assert hello["status"] == "awaiting_input"
            assert hello["pending_input"] == {
                "question": "Which city?",
                "tool_call_id": ask.id,
                "step": 1,
                "expires_at": question["expires_at"],
            }
            await other.send({"type": "agent_user_input", "content": "Lyon"})
            rest = await c.until("response_complete")
            assert rest[-2]["final_answer"] == "Lyon it is."
    observe_request = [r for r in fake_llm.requests if r.phase == "observe"][0]
    tool = [m for m in observe_request.body["messages"] if m["role"] == "tool"]
    assert tool == [{"role": "tool", "content": "Lyon", "tool_call_id": ask.id}]


async def test_a_long_answer_is_cut_like_a_tool_result(server_factory, fake_llm: FakeLLM):
    ask = FakeToolCall("request_input", {"question": "Paste the log?"})
    fake_llm.script("act", act(ask))
    fake_llm.script("observe", observe("Read it.", final="The log is fine."))
    async with server_factory(agent={"tool_result_max_bytes": 4096}) as s:
        async with await s.client() as c:
            await c.recv()
            await c.send({"type": "chat", "content": "check my log"})
            await c.until("agent_request_input")
            await c.send({"type": "agent_user_input", "content": "ok\n" * 30_000})
            frames = await c.until("response_complete")
    (answered,) = [f for f in frames if kind(f) == "agent_user_answer"]
    assert answered["content"].startswith("ok\nok\n")
    assert answered["content"].endswith("are its beginning.]")
    assert len(json.dumps(answered["content"]).encode()) <= 4096
    observe_request = [r for r in fake_llm.requests if r.phase == "observe"][0]
    (tool,) = [m for m in observe_request.body["messages"] if m["role"] == "tool"]
    assert tool["content"] == answered["content"]


async def test_request_input_timeout_ends_the_run(server_factory, fake_llm: FakeLLM):
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Still there?"})))
    async with server_factory(agent={"request_input_timeout_s": 0.3}) as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("ask me")
            assert [kind(f) for f in frames][-4:] == [
                "agent_request_input",
                "agent_request_input_timeout",
                "agent_stopped",
                "response_complete",
            ]
            assert frames[-2]["reason"] == "input_timeout"
            messages = await _messages(s.address, session)
            tool = [m for m in messages if m["role"] == "tool"]
            assert tool[0]["status"] == "timeout" and "did not answer" in tool[0]["content"]
            await c.send({"type": "agent_user_input", "content": "too late"})
            error = await c.recv()
            assert error["code"] == "not_awaiting_input"


async def test_stop_while_a_question_is_pending(server, fake_llm: FakeLLM):
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Yes or no?"})))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "ask"})
        await c.until("agent_request_input")
        await c.send({"type": "agent_control", "action": "stop"})
        frames = await c.until("response_complete")
        assert [kind(f) for f in frames] == ["agent_stopped", "response_complete"]
        async with await server.client(session_id=session) as again:
            hello = await again.recv()
            assert hello["status"] == "idle" and hello["pending_input"] is None
        messages = await _messages(server.address, session)
        assert [m["status"] for m in messages if m["role"] == "tool"] == ["stopped"]


async def test_invalid_request_input_arguments_are_fed_back(server, fake_llm: FakeLLM):
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": ""})))
    fake_llm.script("observe", observe("hmm", final="ok"))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("ask badly")
    assert "agent_request_input" not in [kind(f) for f in frames]
    shown = [(f["type"], f["tool_name"]) for f in frames if f["type"].startswith("tool_")]
    assert shown == [("tool_start", "request_input"), ("tool_error", "request_input")]
    observe_request = [r for r in fake_llm.requests if r.phase == "observe"][-1]
    tool = [m for m in observe_request.body["messages"] if m["role"] == "tool"]
    assert "question" in tool[0]["content"]


async def test_an_answer_naming_its_question_is_not_taken_for_the_next_one(
    server, fake_llm: FakeLLM
):
    """Two questions in one step; a second tab's late answer to the first, naming it, must
    not become the answer to the second (which asks something else)."""
    first = FakeToolCall("request_input", {"question": "Which city?"})
    second = FakeToolCall("request_input", {"question": "Delete all files? (yes/no)"})
    fake_llm.script("act", act(first, second))
    fake_llm.script("observe", observe("Got both.", final="Done."))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "go"})
        await c.until("agent_request_input")
        wrong = {"type": "agent_user_input", "content": "x", "tool_call_id": second.id}
        await c.send({**wrong, "id": "w1"})  # the second is not asked yet
        refused = await c.until("error")
        assert (refused[-1]["code"], refused[-1]["id"]) == ("not_awaiting_input", "w1")
        assert first.id in refused[-1]["message"]
        await c.send({**wrong, "tool_call_id": "c" * 500_000})  # not handed back whole
        long = await c.until("error")
        assert long[-1]["code"] == "not_awaiting_input" and len(long[-1]["message"]) < 300
        await c.send({"type": "agent_user_input", "content": "Lyon", "tool_call_id": first.id})
        asked = await c.until(lambda f: kind(f) == "agent_request_input")
        assert asked[-1]["tool_call_id"] == second.id
        async with await server.client(session_id=session) as late:
            await late.recv()
            stale = {"type": "agent_user_input", "content": "yes", "tool_call_id": first.id}
            await late.send({**stale, "id": "late"})
            error = await late.until("error")
            assert (error[-1]["code"], error[-1]["id"]) == ("not_awaiting_input", "late")
        await c.send({"type": "agent_user_input", "content": "no", "tool_call_id": second.id})
        rest = await c.until("response_complete")
    answers = [(f["tool_call_id"], f["content"]) for f in rest if kind(f) == "agent_user_answer"]
    assert answers == [(second.id, "no")]
    observe_request = [r for r in fake_llm.requests if r.phase == "observe"][-1]
    tool = [m["content"] for m in observe_request.body["messages"] if m["role"] == "tool"]
    assert tool == ["Lyon", "no"]


async def test_stopped_run_events_replay_like_they_were_sent(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(chunks=["a", "b"], hang_after=1))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "x"})
        await c.until("agent_reason_delta")
        await c.send({"type": "agent_control", "action": "stop"})
        await c.until("response_complete")
        live = c.seen[1:]
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        stored = (await http.get(f"/api/sessions/{session}/events")).json()["events"]
    assert stored == live
    assert json.dumps(stored)  # plain JSON


async def test_a_run_past_its_wall_clock_limit_ends_with_a_clear_error(server_factory, fake_llm):
    fake_llm.script("reason", Reply(chunks=["slow"], hang_after=1))
    async with server_factory(agent={"run_timeout_s": 0.3}) as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("never ends")
            assert [kind(f) for f in frames][-2:] == ["error", "response_complete"]
            assert frames[-2]["code"] == "internal_error"
            assert "time limit" in frames[-2]["message"]
            assert frames[-2]["usage"]["llm_calls"] == 1  # the call the limit cut, estimated
            messages = await _messages(s.address, session)
            assert "time limit" in messages[-1]["content"] and messages[-1]["role"] == "system"
            again = await c.run("next one is fine")
            assert again[-2]["type"] == "agent_update"


async def test_a_chat_sent_the_moment_a_run_ends_is_a_proper_run(server, fake_llm: FakeLLM):
    """The next run starts while the previous one is still finishing: it must own the
    session (stop works, a third chat is refused) and end on its own."""
    fake_llm.script("reason", reason("one"), Reply(chunks=["slow"], hang_after=0))
    async with await server.client() as c:
        await c.recv()
        await c.send({"type": "chat", "content": "first"})
        await c.until("response_complete")
        await c.send({"type": "chat", "content": "second"})  # at once, no wait
        await c.until("agent_turn_start")
        await c.send({"type": "chat", "content": "third"})
        assert (await c.recv())["code"] == "run_in_progress"
        await c.send({"type": "agent_control", "action": "stop"})
        frames = await c.until("response_complete")
        assert [kind(f) for f in frames][-2:] == ["agent_stopped", "response_complete"]


async def test_a_chat_stopped_mid_stream_reports_the_cut_call_in_its_usage(
    server, fake_llm: FakeLLM
):
    fake_llm.script("chat", Reply(chunks=["Once upon ", "a time"], hang_after=1))
    async with await server.client() as c:
        await c.recv()
        await c.send({"type": "chat", "content": "a story", "agent_mode": False})
        await c.until("chat_delta")
        await c.send({"type": "agent_control", "action": "stop"})
        frames = await c.until("response_complete")
    (stopped,) = [f for f in frames if kind(f) == "agent_stopped"]
    usage = stopped["usage"]
    assert (usage["llm_calls"], usage["estimated_calls"]) == (1, 1)  # the server sent none
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
