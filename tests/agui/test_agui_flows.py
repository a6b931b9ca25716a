"""AG-UI flows a front end meets beyond one question: several frontend tool calls in one
turn, text around tool calls, a new message instead of a result, refusals that store nothing.
Each event is validated by the SDK's models (`post`) and the lifecycle rules (`check_sequence`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from ag_ui.core import EventType

from tests.agui.test_agui import check_sequence, post, run_input, session_of
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason, text

_SHOW = {
    "name": "show_color",
    "description": "Show a colour in the page.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}},
}


def _assistant_calls(*calls: FakeToolCall) -> dict[str, Any]:
    """The assistant message an AG-UI client keeps for the calls it was shown."""
    return {
        "id": uuid.uuid4().hex,
        "role": "assistant",
        "toolCalls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in calls
        ],
    }


def _result(call: FakeToolCall, content: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex, "role": "tool", "toolCallId": call.id, "content": content}


async def _post_status(address: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.post(f"http://{address}/agui", json=body)


def _two_colours(fake_llm: FakeLLM, final: str) -> tuple[FakeToolCall, FakeToolCall, dict]:
    """A turn that calls the frontend tool twice, and the request that starts it."""
    red = FakeToolCall("show_color", {"color": "red"})
    blue = FakeToolCall("show_color", {"color": "blue"})
    fake_llm.script("reason", reason("I will show both colours."))
    fake_llm.script("act", act(red, blue))
    fake_llm.script("observe", observe("Both shown.", final=final))
    body = run_input(uuid.uuid4().hex, "Show red and blue")
    body["tools"] = [_SHOW]
    return red, blue, body


async def test_two_frontend_calls_of_one_turn_are_pending_together_and_answered_together(
    server, fake_llm: FakeLLM
):
    red, blue, body = _two_colours(fake_llm, "Shown red and blue.")

    first = await post(server.address, body)
    check_sequence(first)
    assert first[-1].outcome.type == "success"
    assert first[-1].outcome.pending_tool_call_ids == [red.id, blue.id]

    body["messages"] += [
        _assistant_calls(red, blue),
        _result(red, "red is on"),
        _result(blue, "blue is on"),
    ]
    second = await post(server.address, body)
    check_sequence(second)
    assert second[-1].outcome.type == "success" and not second[-1].outcome.pending_tool_call_ids
    assert second[-1].result["final_answer"] == "Shown red and blue."
    assert not any(e.type == EventType.TOOL_CALL_RESULT for e in second)
    observe_call = fake_llm.requests[-1].body["messages"]
    results = {m["tool_call_id"]: m["content"] for m in observe_call if m["role"] == "tool"}
    assert results == {red.id: "red is on", blue.id: "blue is on"}


async def test_text_around_a_tool_call_is_two_messages_the_call_in_the_first(
    server, fake_llm: FakeLLM
):
    # Chat mode: the model writes, calls a tool, then writes again. The client's message list
    # must read as the conversation does: the text with its call, the result, the new text.
    call = FakeToolCall("get_current_time", {"timezone": "Asia/Tokyo"})
    fake_llm.script("chat", Reply(chunks=["Let me check ", "the clock."], tool_calls=[call]))
    fake_llm.script("chat", text("It is ", "4am in Tokyo."))
    body = run_input(uuid.uuid4().hex, "Time in Tokyo?", forwarded_props={"agent_mode": False})
    events = await post(server.address, body)
    check_sequence(events)

    starts = [e for e in events if e.type == EventType.TEXT_MESSAGE_START]
    assert len(starts) == 2 and starts[0].message_id != starts[1].message_id
    by_id = {s.message_id: "" for s in starts}
    for e in events:
        if e.type == EventType.TEXT_MESSAGE_CONTENT:
            by_id[e.message_id] += e.delta
    assert list(by_id.values()) == ["Let me check the clock.", "It is 4am in Tokyo."]
    kinds = [e.type for e in events]
    call_start = next(e for e in events if e.type == EventType.TOOL_CALL_START)
    assert call_start.parent_message_id == starts[0].message_id
    ends = [i for i, k in enumerate(kinds) if k == EventType.TEXT_MESSAGE_END]
    assert ends[0] < kinds.index(EventType.TOOL_CALL_START)


async def test_a_resumed_stream_never_reuses_a_message_id(server, fake_llm: FakeLLM):
    # A client merges what arrives under one id: the reply after a frontend tool's result
    # must not be glued onto the text before the call.
    red = FakeToolCall("show_color", {"color": "red"})
    fake_llm.script("chat", Reply(chunks=["Let me show it."], tool_calls=[red]))
    fake_llm.script("chat", text("Done, shown."))
    body = run_input(uuid.uuid4().hex, "Show red", forwarded_props={"agent_mode": False})
    body["tools"] = [_SHOW]
    first = await post(server.address, body)
    assert first[-1].outcome.pending_tool_call_ids == [red.id]
    body["messages"] += [_assistant_calls(red), _result(red, "shown")]
    second = await post(server.address, body)
    check_sequence(second)
    ids = [e.message_id for e in first + second if e.type == EventType.TEXT_MESSAGE_START]
    assert len(ids) == 2 and len(set(ids)) == 2


async def test_a_new_message_instead_of_a_frontend_result_moves_on(server, fake_llm: FakeLLM):
    # The AG-UI run ended in success: the user may ignore the tool's UI and write again.
    red = FakeToolCall("show_color", {"color": "red"})
    fake_llm.script("reason", reason("I will show red."))
    fake_llm.script("act", act(red))
    thread = uuid.uuid4().hex
    body = run_input(thread, "Show red")
    body["tools"] = [_SHOW]
    first = await post(server.address, body)
    assert first[-1].outcome.pending_tool_call_ids == [red.id]

    fake_llm.script("reason", reason("A plain question.", finish=True))
    fake_llm.script("observe", observe("Easy.", final="Four."))
    body["messages"] += [
        _assistant_calls(red),
        {"id": uuid.uuid4().hex, "role": "user", "content": "Never mind: what is 2+2?"},
    ]
    second = await post(server.address, body)
    check_sequence(second)
    assert second[0].run_id != first[0].run_id
    assert second[-1].outcome.type == "success"
    assert second[-1].result["final_answer"] == "Four."


async def _ask_for_a_table(server: Any, fake_llm: FakeLLM) -> tuple[str, list[Any], Any]:
    """A run on a new thread paused on a question: (thread, its events, the interrupt)."""
    fake_llm.script("reason", reason("I need the table."))
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Which table?"})))
    thread = uuid.uuid4().hex
    first = await post(server.address, run_input(thread, "Book a table"))
    (interrupt,) = first[-1].outcome.interrupts
    return thread, first, interrupt


async def test_cancelling_an_open_question_with_a_new_message_runs_the_message(
    server, fake_llm: FakeLLM
):
    thread, first, interrupt = await _ask_for_a_table(server, fake_llm)

    fake_llm.script("reason", reason("Just the time.", finish=True))
    fake_llm.script("observe", observe("Known.", final="Noon."))
    body = run_input(thread, "Never mind, what time is it?")
    body["resume"] = [{"interruptId": interrupt.id, "status": "cancelled"}]
    second = await post(server.address, body)
    check_sequence(second)
    assert second[-1].outcome.type == "success" and second[-1].result["final_answer"] == "Noon."
    async with httpx.AsyncClient() as http:
        stored = await http.get(
            f"http://{server.address}/api/sessions/{session_of(thread)}/messages"
        )
    users = [m["content"] for m in stored.json()["messages"] if m["role"] == "user"]
    assert users == ["Book a table", "Never mind, what time is it?"]


async def test_an_approval_takes_the_approved_key_and_refuses_a_payload_it_cannot_read(
    server_factory, fake_llm: FakeLLM
):
    call = FakeToolCall("get_current_time", {"timezone": "UTC"})
    fake_llm.script("reason", reason("I'll check the clock."))
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("Checked.", final="Done."))
    async with server_factory(tools={"approval": ["get_current_time"]}) as running:
        thread = uuid.uuid4().hex
        first = await post(running.address, run_input(thread, "Time?"))
        (interrupt,) = first[-1].outcome.interrupts
        body = run_input(thread, "Time?")
        body["resume"] = [{"interruptId": interrupt.id, "status": "resolved", "payload": {}}]
        unreadable = await _post_status(running.address, body)
        assert unreadable.status_code == 400 and "approve" in unreadable.json()["message"]
        body["resume"][0]["payload"] = {"approve": False, "reason": "x" * 2001}
        too_long = await _post_status(running.address, body)  # as /ws refuses it
        assert too_long.status_code == 400 and "at most 2000" in too_long.json()["message"]
        body["resume"][0]["payload"] = {"approved": True}
        second = await post(running.address, body)
    check_sequence(second)
    result = next(e for e in second if e.type == EventType.TOOL_CALL_RESULT)
    assert not result.content.startswith("Error") and '"UTC"' in result.content


async def test_refused_requests_store_nothing_and_bad_frontend_tools_are_named(
    server, fake_llm: FakeLLM
):
    def with_tools(thread: str, *tools: Any, **props: Any) -> dict[str, Any]:
        body = run_input(thread, "hi", forwarded_props=props or None)
        body["tools"] = list(tools)
        return body

    refusals = {
        "server tool's name": with_tools(
            "refused-1", {"name": "get_current_time", "description": "", "parameters": {}}
        ),
        "'recall_details' is a server tool's name": with_tools(
            "refused-6", {"name": "recall_details", "description": "", "parameters": {}}
        ),
        "at most": with_tools("refused-2", agent_max_steps=999),
        "1-64 of": with_tools("refused-3", {**_SHOW, "name": "bad name!"}),
        "listed twice": with_tools("refused-4", _SHOW, _SHOW),
        "not a JSON Schema": with_tools("refused-5", {**_SHOW, "parameters": "a string"}),
    }
    async with httpx.AsyncClient(timeout=10) as http:
        for expected, body in refusals.items():
            answer = await http.post(f"http://{server.address}/agui", json=body)
            assert answer.status_code == 400, (expected, answer.text)
            assert expected in answer.json()["message"]
            stored = await http.get(
                f"http://{server.address}/api/sessions/{session_of(body['threadId'])}"
            )
            assert stored.status_code == 404, expected
    assert not fake_llm.requests


async def test_the_event_stream_tells_proxies_not_to_buffer_it(server, fake_llm: FakeLLM):
    fake_llm.script("chat", text("Hi."))
    body = run_input(uuid.uuid4().hex, "hi", forwarded_props={"agent_mode": False})
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("POST", f"http://{server.address}/agui", json=body) as answer:
            await answer.aread()
    assert answer.headers["cache-control"] == "no-cache"
    assert answer.headers["x-accel-buffering"] == "no"


async def test_a_message_with_no_text_part_says_only_text_is_read(server, fake_llm: FakeLLM):
    body = run_input(uuid.uuid4().hex)
    picture = {"type": "image", "source": {"type": "url", "value": "https://example.org/a.png"}}
    body["messages"][-1]["content"] = [picture]
    answer = await _post_status(server.address, body)
    assert answer.status_code == 400
    assert answer.json()["message"] == (
        "messages: only text parts are read, and this message has none."
    )


async def test_a_bare_cancel_with_the_same_history_stops_and_starts_nothing(
    server, fake_llm: FakeLLM
):
    # A client sends its whole history: with a bare cancel, its last message is still the
    # one that started the paused run, which must not be taken for a new request.
    ask = FakeToolCall("request_input", {"question": "Which table?"})
    fake_llm.script("reason", reason("I need the table."))
    fake_llm.script("act", act(ask))
    body = run_input(uuid.uuid4().hex, "Book a table")
    first = await post(server.address, body)
    (interrupt,) = first[-1].outcome.interrupts
    calls = len(fake_llm.requests)
    body["resume"] = [{"interruptId": interrupt.id, "status": "cancelled"}]
    second = await post(server.address, body)
    check_sequence(second)
    assert second[0].run_id == first[0].run_id
    assert second[-1].outcome.type == "cancelled"
    assert len(fake_llm.requests) == calls  # nothing was run again


async def test_a_new_message_past_an_open_question_is_told_what_to_do(server, fake_llm: FakeLLM):
    thread, first, interrupt = await _ask_for_a_table(server, fake_llm)
    answer = await _post_status(server.address, run_input(thread, "Something else"))
    assert answer.status_code == 409 and answer.json()["code"] == "run_in_progress"
    assert f"paused on the interrupt {interrupt.id!r}" in answer.json()["message"]


async def test_results_reach_the_run_when_the_client_leaves_right_after_sending_them(
    server, fake_llm: FakeLLM
):
    # A page that posts its results and unloads: closing the request never stops the run,
    # so every result it brought must still reach its call.
    calls = [FakeToolCall("show_color", {"color": c}) for c in ("red", "green", "blue")]
    fake_llm.script("reason", reason("I will show three colours."))
    fake_llm.script("act", act(*calls))
    fake_llm.script("observe", observe("All shown.", final="Shown three."))
    thread = uuid.uuid4().hex
    body = run_input(thread, "Show three colours")
    body["tools"] = [_SHOW]
    first = await post(server.address, body)
    assert first[-1].outcome.pending_tool_call_ids == [c.id for c in calls]
    body["messages"] += [_assistant_calls(*calls)] + [_result(c, f"{c.id} on") for c in calls]
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("POST", f"http://{server.address}/agui", json=body) as answer:
            assert answer.status_code == 200  # and gone, without reading a single event
    async with await server.client(session_id=session_of(thread)) as watcher:
        hello = await watcher.recv()
        if hello["status"] != "idle":
            await watcher.until("response_complete", timeout=10)
    observed = fake_llm.requests[-1].body["messages"]
    results = {m["tool_call_id"]: m["content"] for m in observed if m["role"] == "tool"}
    assert results == {c.id: f"{c.id} on" for c in calls}


async def test_a_frontend_call_stays_the_clients_when_its_history_leaves_the_call_out(
    server, fake_llm: FakeLLM
):
    # Only the `tools` say a call is the client's: a client that sends back its result
    # without the assistant message holding the calls must still get `pendingToolCallIds`,
    # never the server's own wording as a question to its user.
    red, blue, body = _two_colours(fake_llm, "Shown.")
    await post(server.address, body)
    body["messages"] += [_result(red, "red is on")]  # no assistant message with the calls
    second = await post(server.address, body)
    check_sequence(second)
    assert second[-1].outcome.type == "success"
    assert second[-1].outcome.pending_tool_call_ids == [blue.id]


async def test_a_quiet_stream_sends_keepalive_comments(
    server, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
):
    # A proxy closes a response that sends nothing for a minute; a run may be quiet longer.
    monkeypatch.setattr("server.agui._KEEPALIVE_S", 0.2)
    fake_llm.script("chat", Reply(chunks=["Hel", "lo."], delay_s=0.5))
    body = run_input(uuid.uuid4().hex, "hi", forwarded_props={"agent_mode": False})
    lines = []
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("POST", f"http://{server.address}/agui", json=body) as answer:
            async for line in answer.aiter_lines():
                lines.append(line)
    assert ": keepalive" in lines
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert events[-1]["type"] == "RUN_FINISHED"
