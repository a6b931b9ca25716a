"""POST /agui against the real server, decoded and validated with the official
`ag-ui-protocol` types: any event the SDK's models reject fails the test."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
from ag_ui.core import Event, EventType, RunAgentInput, UserMessage
from pydantic import TypeAdapter

from server.agui import _Stream
from server.agui_threads import thread_session
from server.auth import LOCAL_SCOPE
from server.storage.base import Scope
from tests.fakes.client import Client
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason, text

EVENT = TypeAdapter(Event)


def session_of(thread: str) -> str:
    """The session that holds a new thread in no-auth mode (server/agui_threads.py)."""
    return thread_session(LOCAL_SCOPE, thread)


def run_input(thread_id: str, content: str = "hello", **extra: Any) -> dict[str, Any]:
    body = RunAgentInput(
        thread_id=thread_id,
        run_id=uuid.uuid4().hex,
        messages=[UserMessage(id=uuid.uuid4().hex, content=content)],
        tools=[],
        context=[],
        **extra,
    )
    return json.loads(body.model_dump_json(by_alias=True))


async def post(address: str, body: dict[str, Any], **headers: str) -> list[Any]:
    """POST /agui and return every event of the SSE stream, validated by the SDK's models."""
    events = []
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("POST", f"http://{address}/agui", json=body, headers=headers) as r:
            assert r.status_code == 200, await r.aread()
            assert r.headers["content-type"].startswith("text/event-stream")
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(EVENT.validate_json(line[6:]))
    return events


def types(events: list[Any]) -> list[str]:
    return [e.type.value for e in events]


def check_sequence(events: list[Any]) -> None:
    """The lifecycle rules of AG-UI's verifier: opened things close before RUN_FINISHED."""
    assert events[0].type == EventType.RUN_STARTED
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    open_steps: set[str] = set()
    open_messages: set[str] = set()
    for e in events[1:-1]:
        assert e.type not in (EventType.RUN_STARTED, EventType.RUN_FINISHED)
        if e.type == EventType.STEP_STARTED:
            assert e.step_name not in open_steps
            open_steps.add(e.step_name)
        elif e.type == EventType.STEP_FINISHED:
            open_steps.remove(e.step_name)
        elif e.type in (EventType.TEXT_MESSAGE_START, EventType.REASONING_MESSAGE_START):
            assert e.message_id not in open_messages
            open_messages.add(e.message_id)
        elif e.type in (EventType.TEXT_MESSAGE_END, EventType.REASONING_MESSAGE_END):
            open_messages.remove(e.message_id)
        elif e.type in (EventType.TEXT_MESSAGE_CONTENT, EventType.REASONING_MESSAGE_CONTENT):
            assert e.message_id in open_messages
    if events[-1].type == EventType.RUN_FINISHED:
        assert not open_steps and not open_messages


async def test_a_run_maps_onto_ag_ui_events_and_keeps_every_seq(server, fake_llm: FakeLLM):
    call = FakeToolCall("get_current_time", {"timezone": "Europe/Paris"})
    fake_llm.script("reason", reason("I'll check the time in Paris."))
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("It is daytime there.", final="It is **noon** in Paris."))
    thread = uuid.uuid4().hex
    events = await post(server.address, run_input(thread, "What time is it in Paris?"))

    check_sequence(events)
    started, finished = events[0], events[-1]
    assert started.thread_id == thread and finished.thread_id == thread
    assert finished.type == EventType.RUN_FINISHED and finished.outcome.type == "success"
    assert finished.result["final_answer"] == "It is **noon** in Paris."
    run_id = started.run_id
    assert finished.run_id == run_id
    kinds = types(events)
    assert kinds.index("STEP_STARTED") < kinds.index("REASONING_START")
    assert kinds.index("REASONING_MESSAGE_CONTENT") < kinds.index("TOOL_CALL_START")
    tool = [e for e in events if e.type.value.startswith("TOOL_CALL")]
    assert types(tool) == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    assert tool[0].tool_call_id == call.id and tool[0].tool_call_name == "get_current_time"
    assert json.loads(tool[1].delta) == {"timezone": "Europe/Paris"}
    assert json.loads(tool[3].content)["timezone"] == "Europe/Paris"
    answer = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert answer == "It is **noon** in Paris."
    reasoning = "".join(e.delta for e in events if e.type == EventType.REASONING_MESSAGE_CONTENT)
    assert "I'll check the time in Paris." in reasoning and "```" not in reasoning
    # Our frames ride along as rawEvent: the seqs the store gave them, none lost.
    seqs = sorted({e.raw_event["seq"] for e in events if e.raw_event})
    async with httpx.AsyncClient() as http:
        stored = (
            await http.get(f"http://{server.address}/api/sessions/{session_of(thread)}/events")
        ).json()
    run_seqs = [f["seq"] for f in stored["events"] if f.get("run_id") == run_id]
    assert seqs == run_seqs
    assert any(e.type == EventType.CUSTOM and e.name == "agent_completion" for e in events)


async def test_a_question_is_an_interrupt_and_the_resume_answers_the_same_run(
    server, fake_llm: FakeLLM
):
    ask = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script("reason", reason("I need to know the city."))
    fake_llm.script("act", act(ask))
    fake_llm.script(
        "observe",
        lambda body: observe("Got it.", final="Lisbon" if "Lisbon" in json.dumps(body) else "?"),
    )
    thread = uuid.uuid4().hex
    first = await post(server.address, run_input(thread, "Plan my trip"))
    check_sequence(first)
    outcome = first[-1].outcome
    assert outcome.type == "interrupt"
    (interrupt,) = outcome.interrupts
    assert interrupt.id == ask.id and interrupt.message == "Which city?"
    assert interrupt.reason == "input_required" and interrupt.expires_at.endswith("Z")

    # The run is paused, not over: /ws sees it awaiting input, on the same session.
    async with await server.client(session_id=session_of(thread)) as ws:
        session = await ws.recv()
        assert session["status"] == "awaiting_input"
        assert session["pending_input"]["tool_call_id"] == ask.id

        resume = run_input(thread, "Plan my trip")
        resume["resume"] = [{"interruptId": ask.id, "status": "resolved", "payload": "Lisbon"}]
        second = await post(server.address, resume)
        frames = await ws.until("response_complete", timeout=10)

    check_sequence(second)
    assert second[0].run_id == first[0].run_id  # the same run, continued
    assert second[1].type == EventType.STEP_STARTED and second[1].step_name == "step 1"
    assert second[-1].outcome.type == "success"
    assert "Lisbon" in second[-1].result["final_answer"]
    answered = [e for e in second if e.type == EventType.CUSTOM and e.name == "agent_user_answer"]
    assert answered and answered[0].value["content"] == "Lisbon"
    assert frames[-1]["run_id"] == first[0].run_id  # /ws watched the AG-UI run to its end


async def test_a_run_started_on_ws_is_refused_a_second_start_and_the_thread_continues(
    server, fake_llm: FakeLLM
):
    fake_llm.script("reason", reason("Quick.", finish=True), reason("Again.", finish=True))
    fake_llm.script("observe", observe("ok", final="first"), observe("ok", final="second"))
    async with await server.client() as ws:
        session = await ws.recv()
        await ws.run("from the socket")
    thread = session["session_id"]
    events = await post(server.address, run_input(thread, "from AG-UI"))
    assert events[-1].result["final_answer"] == "second"
    history = fake_llm.requests[-1].body["messages"]
    assert any("from the socket" in str(m.get("content")) for m in history)  # stored history


async def test_context_items_reach_the_model(server, fake_llm: FakeLLM):
    fake_llm.script("reason", reason("Fine.", finish=True))
    fake_llm.script("observe", observe("ok", final="done"))
    body = run_input(uuid.uuid4().hex, "hi")
    body["context"] = [{"description": "user's timezone", "value": "Asia/Tokyo"}]
    await post(server.address, body)
    sent = json.dumps(fake_llm.requests[0].body["messages"])
    assert "user's timezone: Asia/Tokyo" in sent


async def test_abort_does_not_stop_the_run_and_stop_does(server, fake_llm: FakeLLM):
    fake_llm.script("reason", text("thinking", hang_after=1))
    thread = uuid.uuid4().hex
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream(
            "POST", f"http://{server.address}/agui", json=run_input(thread, "long task")
        ) as r:
            async for line in r.aiter_lines():
                if "REASONING_MESSAGE_CONTENT" in line:
                    break  # the client leaves mid-run
        async with await server.client(session_id=session_of(thread)) as ws:
            session = await ws.recv()
            assert session["status"] == "running"  # the run outlived the request
            stop = await http.post(f"http://{server.address}/agui/{thread}/stop")
            assert stop.status_code == 202
            frames = await ws.until("response_complete", timeout=5)
        again = await http.post(f"http://{server.address}/agui/{thread}/stop")
    stopped = next(f for f in frames if f.get("update_type") == "agent_stopped")
    assert stopped["reason"] == "user"
    assert again.status_code == 409 and again.json()["code"] == "no_active_run"


async def test_refusals_follow_the_ws_rules(server_factory, fake_llm: FakeLLM):
    tokens = {
        "alice-token-0123456789": {"tenant": "acme", "user": "alice"},
        "bob-token-0123456789": {"tenant": "acme", "user": "bob"},
    }
    fake_llm.script("reason", reason("Quick.", finish=True))
    fake_llm.script("observe", observe("ok", final="done"))
    async with server_factory(auth={"tokens": tokens}) as running:
        url = f"http://{running.address}/agui"
        thread = uuid.uuid4().hex
        alice = {"Authorization": "Bearer alice-token-0123456789"}
        events = await post(running.address, run_input(thread), **alice)
        assert events[-1].outcome.type == "success"
        async with httpx.AsyncClient(timeout=10) as http:
            none = await http.post(url, json=run_input(thread))
            stop = await http.post(
                f"{url}/{thread}/stop", headers={"Authorization": "Bearer bob-token-0123456789"}
            )
            bob = await http.post(  # Bob's own thread of that id, a conversation of his
                url,
                json=run_input(thread),
                headers={"Authorization": "Bearer bob-token-0123456789"},
            )
            origin = await http.post(
                url, json=run_input(uuid.uuid4().hex), headers={**alice, "Origin": "http://evil"}
            )
            bad = await http.post(url, json={"threadId": "x"}, headers=alice)
            not_user = run_input(thread)
            not_user["messages"] = [{"id": "a", "role": "assistant", "content": "hi"}]
            last = await http.post(url, json=not_user, headers=alice)
    assert none.status_code == 401
    assert bob.status_code == 200
    assert origin.status_code == 403
    assert bad.status_code == 400 and last.status_code == 400
    assert stop.status_code == 404


async def test_a_frontend_tool_call_ends_the_run_and_the_next_run_carries_its_result(
    server, fake_llm: FakeLLM
):
    show = FakeToolCall("show_map", {"city": "Lisbon"})
    fake_llm.script("reason", reason("I will show the map."))
    fake_llm.script("act", act(show))
    fake_llm.script(
        "observe",
        lambda body: observe("Shown.", final="map ok" if "pinned 3" in json.dumps(body) else "?"),
    )
    thread = uuid.uuid4().hex
    body = run_input(thread, "Show me Lisbon")
    body["tools"] = [
        {
            "name": "show_map",
            "description": "Show a city on the map in the page.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    first = await post(server.address, body)
    check_sequence(first)
    assert first[-1].outcome.type == "success"
    assert first[-1].outcome.pending_tool_call_ids == [show.id]
    start = next(e for e in first if e.type == EventType.TOOL_CALL_START)
    assert start.tool_call_name == "show_map" and start.tool_call_id == show.id
    assert not any(e.type == EventType.TOOL_CALL_RESULT for e in first)
    offered = [t["function"]["name"] for t in fake_llm.requests[1].body["tools"]]
    assert "show_map" in offered and "get_current_time" in offered

    body["messages"] += [
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": show.id,
                    "type": "function",
                    "function": {"name": "show_map", "arguments": '{"city": "Lisbon"}'},
                }
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": show.id, "content": "pinned 3 places"},
    ]
    second = await post(server.address, body)
    check_sequence(second)
    assert second[0].run_id == first[0].run_id
    # The client has its result in its own messages: a TOOL_CALL_RESULT would be a second one.
    assert not any(e.type == EventType.TOOL_CALL_RESULT for e in second)
    assert second[-1].result["final_answer"] == "map ok"

    async with httpx.AsyncClient(timeout=10) as http:
        stale = await http.post(f"http://{server.address}/agui", json=body)
    assert stale.status_code == 409 and stale.json()["code"] == "not_awaiting_input"


async def test_a_tool_approval_is_an_interrupt_and_a_denial_resumes_the_run(
    server_factory, fake_llm: FakeLLM
):
    call = FakeToolCall("get_current_time", {"timezone": "UTC"})
    fake_llm.script("reason", reason("I'll check the clock."))
    fake_llm.script("act", act(call))
    fake_llm.script(
        "observe",
        lambda body: observe("ok", final="declined" if "too early" in json.dumps(body) else "?"),
    )
    async with server_factory(tools={"approval": ["get_current_time"]}) as running:
        thread = uuid.uuid4().hex
        first = await post(running.address, run_input(thread, "What time is it?"))
        check_sequence(first)
        (interrupt,) = first[-1].outcome.interrupts
        assert interrupt.reason == "tool_approval" and interrupt.tool_call_id == call.id
        assert interrupt.metadata["tool_name"] == "get_current_time"
        resume = run_input(thread, "What time is it?")
        payload = {"approve": False, "reason": "too early"}
        resume["resume"] = [{"interruptId": call.id, "status": "resolved", "payload": payload}]
        second = await post(running.address, resume)
    check_sequence(second)
    result = next(e for e in second if e.type == EventType.TOOL_CALL_RESULT)
    assert result.content.startswith("Error: The user declined: too early")
    assert second[-1].result["final_answer"] == "declined"


async def test_a_browser_on_an_allowed_origin_gets_cors_headers(server, fake_llm: FakeLLM):
    fake_llm.script("reason", reason("Quick.", finish=True))
    fake_llm.script("observe", observe("ok", final="done"))
    allowed = "http://localhost:8765"
    url = f"http://{server.address}/agui"
    async with httpx.AsyncClient(timeout=10) as http:
        ok = await http.options(url, headers={"Origin": allowed})
        evil = await http.options(url, headers={"Origin": "http://evil"})
        posted = await http.post(url, json=run_input(uuid.uuid4().hex), headers={"Origin": allowed})
    assert ok.status_code == 204 and ok.headers["access-control-allow-origin"] == allowed
    assert "authorization" in ok.headers["access-control-allow-headers"]
    assert evil.status_code == 403 and "access-control-allow-origin" not in evil.headers
    assert posted.status_code == 200 and posted.headers["access-control-allow-origin"] == allowed
    assert '"type":"RUN_FINISHED"' in posted.text


async def test_an_unanswered_question_times_out_and_cancelling_it_moves_on(
    server_factory, fake_llm: FakeLLM
):
    ask = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script("reason", reason("I need the city."), reason("New task.", finish=True))
    fake_llm.script("act", act(ask))
    fake_llm.script("observe", observe("ok", final="moved on"))
    async with server_factory(agent={"request_input_timeout_s": 0.3}) as running:
        thread = uuid.uuid4().hex
        first = await post(running.address, run_input(thread, "Plan my trip"))
        assert first[-1].outcome.type == "interrupt"
        async with await running.client(session_id=session_of(thread), after_seq=0) as ws:
            frames = await ws.until("response_complete", timeout=5)
        stopped = next(f for f in frames if f.get("update_type") == "agent_stopped")
        assert stopped["reason"] == "input_timeout"
        late = run_input(thread, "Plan my trip")
        late["resume"] = [{"interruptId": ask.id, "status": "resolved", "payload": "Lisbon"}]
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(f"http://{running.address}/agui", json=late)
        assert refused.status_code == 409 and refused.json()["code"] == "not_awaiting_input"
        moving_on = run_input(thread, "Something else")
        moving_on["resume"] = [{"interruptId": ask.id, "status": "cancelled"}]
        second = await post(running.address, moving_on)
    assert second[0].run_id != first[0].run_id
    assert second[-1].result["final_answer"] == "moved on"


async def test_a_frontend_tool_may_not_take_a_server_tool_name(server):
    body = run_input(uuid.uuid4().hex)
    body["tools"] = [{"name": "get_current_time", "description": "mine"}]
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(f"http://{server.address}/agui", json=body)
    assert r.status_code == 400 and "'get_current_time'" in r.json()["message"]


async def test_a_stop_from_ws_ends_the_ag_ui_stream_as_cancelled(server, fake_llm: FakeLLM):
    fake_llm.script("reason", text("thinking", hang_after=1))
    thread = uuid.uuid4().hex
    events = []
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream(
            "POST", f"http://{server.address}/agui", json=run_input(thread, "long task")
        ) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(EVENT.validate_json(line[6:]))
                if events[-1].type == EventType.REASONING_MESSAGE_CONTENT:
                    async with await server.client(session_id=session_of(thread)) as ws:
                        await ws.recv()
                        await ws.send({"type": "agent_control", "action": "stop"})
                        await ws.until("response_complete")
    check_sequence(events)
    assert events[-1].outcome.type == "cancelled"
    kinds = types(events)
    assert kinds[-4:] == ["REASONING_MESSAGE_END", "REASONING_END", "STEP_FINISHED", "RUN_FINISHED"]
    stopped = next(e for e in events if e.type == EventType.CUSTOM and e.name == "agent_stopped")
    assert stopped.value["reason"] == "user"


async def test_chat_mode_streams_one_text_message(server, fake_llm: FakeLLM):
    fake_llm.script("chat", text("Hello", " there."))
    body = run_input(uuid.uuid4().hex, "hi")
    body["forwardedProps"] = {"agent_mode": False}
    events = await post(server.address, body)
    check_sequence(events)
    assert types(events) == [
        "RUN_STARTED",
        "CUSTOM",  # agent_user_message: its seq is kept like every event's
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert "".join(e.delta for e in events[3:5]) == "Hello there."


async def test_a_failing_model_is_a_run_error(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(status=400))
    events = await post(server.address, run_input(uuid.uuid4().hex))
    check_sequence(events)
    assert events[-1].type == EventType.RUN_ERROR and events[-1].code == "llm_error"


async def test_a_stop_sent_as_the_run_starts_cancels_it_cleanly(server, fake_llm: FakeLLM):
    fake_llm.script("reason", text("thinking", hang_after=1))
    thread = uuid.uuid4().hex
    events: list[Any] = []
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream(
            "POST", f"http://{server.address}/agui", json=run_input(thread, "long task")
        ) as r:
            # The stop goes out as soon as the stream opens, before any event is read.
            stop = await http.post(f"http://{server.address}/agui/{thread}/stop")
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(EVENT.validate_json(line[6:]))
        assert stop.status_code == 202, stop.text
        check_sequence(events)
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].outcome.type == "cancelled"
    async with await server.client(session_id=session_of(thread)) as ws:
        assert (await ws.recv())["status"] == "idle"  # the thread takes its next run


async def test_a_message_whose_echo_would_pass_the_frame_limit_is_refused(server_factory):
    """The body fits `server.max_message_bytes`, but the run's `agent_user_message` (what a
    WebSocket client watching the thread gets) would not: refused like the WS `chat`."""
    limit = 4096
    thread = "t"  # the frame holds the session's id, 37 characters, the body this one
    body = run_input(thread, "")
    spare = limit - 10 - len(json.dumps(body).encode())
    body["messages"][0]["content"] = "x" * spare
    assert len(json.dumps(body).encode()) < limit
    async with server_factory(server={"max_message_bytes": limit}) as running:
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(f"http://{running.address}/agui", json=body)
            body["messages"][0]["content"] = "x" * (spare - 200)
            events = await post(running.address, body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "invalid_message" and "agent_user_message" in refused.text
    assert events[-1].type == EventType.RUN_FINISHED


async def test_a_body_of_many_wrong_items_is_refused_in_a_few_lines(server):
    """Validation costs per item, and a message naming every wrong one would be many times the
    body's size: long lists are refused before validation, and a message lists ten problems."""
    thread = uuid.uuid4().hex
    many = run_input(thread)
    many["messages"] = [1] * 300_000
    parts = run_input(thread)
    parts["messages"][0]["content"] = [1] * 300_000
    wrong = run_input(thread)
    wrong["messages"] = [1] * 50
    not_a_list = run_input(thread)
    not_a_list["messages"] = 5  # was a 500: counted as if it were a list
    async with httpx.AsyncClient(timeout=10) as http:
        url = f"http://{server.address}/agui"
        replies = [await http.post(url, json=body) for body in (many, parts, wrong, not_a_list)]
        not_json = await http.post(
            url, content=b"{nope", headers={"content-type": "application/json"}
        )
    for reply in [*replies, not_json]:
        assert reply.status_code == 400 and reply.json()["code"] == "invalid_message"
        assert len(reply.content) < 2000, reply.text[:300]
    assert "messages: at most 10000 (got 300000)" in replies[0].text
    assert "messages.0.content: at most 1024 parts" in replies[1].text
    assert (
        replies[2].json()["message"].count("messages.") == 10 and "more errors" in replies[2].text
    )
    assert "not valid JSON" in not_json.text
    events = await post(server.address, run_input(thread))  # and it goes on serving
    assert events[-1].type == EventType.RUN_FINISHED


async def test_another_users_thread_id_is_his_own_thread_and_never_locks_its_owner_out(
    server_factory,
):
    """POST /agui with someone else's thread id used to hold a copy of it under the caller
    until its insert failed; meanwhile the owner's own connections got session_not_found.
    Thread ids are now each caller's own: the same id is another thread of Mallory's."""
    tokens = {
        "alice-token-0123456789": {"tenant": "acme", "user": "alice"},
        "mallory-token-0123456789": {"tenant": "evil", "user": "mallory"},
    }
    alice = {"Authorization": "Bearer alice-token-0123456789"}
    mallory = {"Authorization": "Bearer mallory-token-0123456789"}
    thread = uuid.uuid4().hex
    session = thread_session(Scope("acme", "alice"), thread)
    async with server_factory(auth={"tokens": tokens}) as running:
        url = f"http://{running.address}/agui"
        await post(running.address, run_input(thread), **alice)  # Alice's thread, stored
        answered: list[int] = []
        done = asyncio.Event()

        async def squat() -> None:
            async with httpx.AsyncClient(timeout=10) as http:
                while not done.is_set():
                    reply = await http.post(url, json=run_input(thread), headers=mallory)
                    answered.append(reply.status_code)

        squatters = [asyncio.create_task(squat()) for _ in range(3)]
        try:
            firsts = []
            for _ in range(30):
                async with await Client.connect(
                    running.address, headers=alice, session_id=session
                ) as c:
                    firsts.append(await c.recv())
        finally:
            done.set()
            await asyncio.gather(*squatters)
    assert all(f["type"] == "session" and f["resumed"] for f in firsts), firsts
    assert answered and 404 not in answered and 200 in answered  # run, or 409: one going on


async def test_an_unread_stream_is_bounded_in_bytes():
    """An AG-UI client that stops reading its SSE response holds the session's frames; they
    are bounded in bytes, not only in number (frames can be near a megabyte each)."""
    stream = _Stream(max_queued=1_000, max_bytes=10_000)
    for _ in range(2):
        stream.deliver("x" * 4_000, None)
    assert not stream.overflowed
    assert await stream.next() == "x" * 4_000  # read: no longer counted
    stream.deliver("x" * 4_000, None)
    assert not stream.overflowed
    stream.deliver("x" * 4_000, None)
    assert stream.overflowed


async def test_a_refused_request_leaves_no_conversation_behind(server):
    """The thread was stored before the request was checked: a refused request left an
    empty conversation in the caller's list, as many as it sent."""
    async with httpx.AsyncClient(base_url=f"http://{server.address}", timeout=10) as http:
        for last in ("assistant", "tool"):
            body = run_input(uuid.uuid4().hex)
            body["messages"] = [{"id": "m", "role": last, "content": "x", "toolCallId": "c"}]
            refused = await http.post("/agui", json=body)
            assert refused.status_code in (400, 404), refused.text
        empty = run_input(uuid.uuid4().hex, "   ")
        assert (await http.post("/agui", json=empty)).status_code == 400
        listed = (await http.get("/api/sessions")).json()["sessions"]
    assert listed == []


async def test_an_answer_sent_back_for_its_figures_ends_as_one_whole_message(
    server, fake_llm: FakeLLM
):
    """The figure check discards the first draft (its message ends, a CUSTOM agent_verify
    says why); the answer that stands is a new message whose text, the caveat included, is
    the run's final answer."""
    fake_llm.script(
        "observe",
        observe("Recalling.", final="Mount Everest is 8849 m high."),
        observe("Recalling.", final="Mount Everest is 8849 m high."),
    )
    events = await post(server.address, run_input(uuid.uuid4().hex, "How high is Everest?"))
    check_sequence(events)
    verdicts = [e for e in events if e.type == EventType.CUSTOM and e.name == "agent_verify"]
    assert len(verdicts) == 1 and "8849" in verdicts[0].value["reason"]
    final = events[-1].result["final_answer"]
    said = "Mount Everest is 8849 m high.\n\n(No tool gave me 8849: I could not check it.)"
    assert final == said
    last_message = [e for e in events if e.type == EventType.TEXT_MESSAGE_START][-1].message_id
    text = "".join(
        e.delta
        for e in events
        if e.type == EventType.TEXT_MESSAGE_CONTENT and e.message_id == last_message
    )
    assert text.strip() == final
