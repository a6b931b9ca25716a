"""Every dead end has a way forward: retry, continue, ids that say which message was refused,
answers every tab sees, and a session frame that carries the server's defaults."""

from __future__ import annotations

from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe


async def test_the_session_frame_carries_the_model_and_defaults(server_factory, fake_llm):
    async with server_factory(agent={"default_max_steps": 4, "max_steps_limit": 12}) as s:
        async with await s.client() as c:
            first = await c.recv()
    assert first["model"] == s.settings.llm.model
    assert first["defaults"] == {
        "agent_mode": True,
        "max_steps": 4,
        "max_steps_limit": 12,
        "style": "balanced",
    }


async def test_errors_echo_the_id_of_the_message_they_refuse(server, fake_llm: FakeLLM):
    async with await server.client() as c:
        await c.recv()
        await c.send({"type": "chat", "content": "", "id": "m-1"})
        refused = await c.recv()
        await c.send({"type": "agent_control", "action": "stop", "id": "m-2"})
        nothing = await c.recv()
        await c.send({"type": "chat", "content": "x", "id": 7})
        wrong_id = await c.recv()
        await c.send({"type": "dance", "id": "m-4"})
        unknown = await c.recv()
        frames = await c.run("hello", id="m-3")
    assert (refused["code"], refused["id"]) == ("invalid_message", "m-1")
    assert (nothing["code"], nothing["id"]) == ("no_active_run", "m-2")
    assert wrong_id["code"] == "invalid_message" and "id" in wrong_id["message"]
    assert "id" not in wrong_id  # an id that is not a string is not echoed
    assert (unknown["code"], unknown["id"]) == ("unknown_type", "m-4")
    assert kind(frames[0]) == "agent_user_message" and frames[0]["id"] == "m-3"


async def test_retry_runs_the_last_message_again_after_a_stop(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(chunks=["Thinking"], hang_after=1))
    async with await server.client() as c:
        await c.recv()
        await c.send({"type": "agent_control", "action": "retry", "id": "r-0"})
        empty = await c.recv()
        await c.send({"type": "chat", "content": "plan my trip"})
        await c.until("agent_reason_delta")
        await c.send({"type": "agent_control", "action": "stop"})
        await c.until("response_complete")
        fake_llm.script("observe", observe("ok", final="Here is your trip."))
        await c.send({"type": "agent_control", "action": "retry", "id": "r-1"})
        frames = await c.until("response_complete")
    assert (empty["code"], empty["id"]) == ("nothing_to_retry", "r-0")
    first = frames[0]
    assert kind(first) == "agent_user_message"
    assert (first["content"], first["origin"], first["id"]) == ("plan my trip", "retry", "r-1")
    assert frames[-2]["final_answer"] == "Here is your trip."


async def test_continue_goes_on_after_the_step_limit_only(server, fake_llm: FakeLLM):
    fake_llm.script("observe", observe("More to do."))
    fake_llm.script("summarize", Reply(chunks=["Stopped at the limit."]))
    async with await server.client() as c:
        await c.recv()
        limited = await c.run("long task", agent_max_steps=1)
        assert limited[-2]["stop_reason"] == "max_steps"
        fake_llm.script("observe", observe("Done now.", final="All done."))
        await c.send({"type": "agent_control", "action": "continue", "agent_max_steps": 2})
        frames = await c.until("response_complete")
        await c.send({"type": "agent_control", "action": "continue"})
        refused = await c.recv()
    assert frames[0]["origin"] == "continue" and frames[1]["max_steps"] == 2
    assert frames[-2]["final_answer"] == "All done."
    assert refused["code"] == "nothing_to_retry"  # the last run finished: nothing to continue


async def test_an_answer_is_an_event_every_tab_sees(server, fake_llm: FakeLLM):
    call = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("ok", final="Lyon it is."))
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "plan"})
        await c.until("agent_request_input")
        async with await server.client(session_id=session) as other:
            await other.recv()
            await c.send({"type": "agent_user_input", "content": "Lyon"})
            seen = await other.until("agent_user_answer")
        await c.until("response_complete")
    answered = seen[-1]
    assert (answered["content"], answered["tool_call_id"]) == ("Lyon", call.id)


async def test_a_retry_is_shown_while_it_waits(server_factory, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(status=503))
    async with server_factory(llm={"max_retries": 2}) as s, await s.client() as c:
        await c.recv()
        frames = await c.run("hi")
    retry = next(f for f in frames if kind(f) == "agent_llm_retry")
    assert retry["attempt"] == 2 and retry["max_attempts"] == 3 and retry["phase"] == "reason"
    assert frames[-2]["update_type"] == "agent_completion"
