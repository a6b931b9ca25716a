"""AG-UI reconnect (`POST /agui/connect`, issue 46, item 11): a front end that reloaded gets
the thread's messages as a snapshot, then the run going on from its start and live to its
end; @ag-ui/client's `connectAgent` builds its message list from it."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from typing import Any

import httpx
from ag_ui.core import EventType

from tests.agui.test_agui import EVENT, check_sequence, run_input
from tests.agui.test_agui_client import NPM_DIR
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason

SCRIPT = __file__.replace("test_agui_connect.py", "connect.mjs")


async def _first_run(server: Any, fake_llm: FakeLLM) -> tuple[str, FakeToolCall]:
    """A thread with one finished run: a tool call, its result and the answer."""
    clock = FakeToolCall("get_current_time", {"timezone": "Europe/Lisbon"})
    fake_llm.script("reason", reason("Check the clock."))
    fake_llm.script("act", act(clock))
    fake_llm.script("observe", observe("Got it.", final="It is **noon** in Lisbon."))
    async with await server.client() as c:
        thread = (await c.recv())["session_id"]
        await c.run("What time is it in Lisbon?")
    return thread, clock


async def _connect(address: str, thread: str, seen: asyncio.Queue[Any] | None = None) -> list[Any]:
    """POST /agui/connect; every event until the stream ends, each also put in `seen`."""
    events = []
    async with httpx.AsyncClient(timeout=10) as http:
        url = f"http://{address}/agui/connect"
        async with http.stream("POST", url, json=run_input(thread, "ignored")) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(EVENT.validate_json(line[6:]))
                    if seen is not None:
                        seen.put_nowait(events[-1])
    return events


async def _until(seen: asyncio.Queue[Any], kind: EventType, name: str | None = None) -> Any:
    """The next event in `seen` of `kind` (a CUSTOM one named `name`)."""
    async with asyncio.timeout(10):
        while True:
            event = await seen.get()
            if event.type == kind and (name is None or event.name == name):
                return event


async def test_an_idle_thread_reconnects_to_its_messages(server: Any, fake_llm: FakeLLM) -> None:
    thread, clock = await _first_run(server, fake_llm)
    events = await _connect(server.address, thread)
    check_sequence(events)
    assert [e.type for e in events] == [
        EventType.RUN_STARTED,
        EventType.MESSAGES_SNAPSHOT,
        EventType.RUN_FINISHED,
    ]
    messages = events[1].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0].content == "What time is it in Lisbon?"
    assert messages[1].tool_calls[0].id == clock.id
    assert messages[2].tool_call_id == clock.id and "Europe/Lisbon" in messages[2].content
    assert messages[3].content == "It is **noon** in Lisbon."  # no working notes


async def test_a_running_thread_reconnects_to_the_run_and_follows_it_live(
    server: Any, fake_llm: FakeLLM
) -> None:
    thread, _ = await _first_run(server, fake_llm)
    fake_llm.script("reason", Reply(chunks=["Thinking it over"], hang_after=1))
    async with await server.client(session_id=thread) as c:
        await c.recv()
        await c.send({"type": "chat", "content": "And in Tokyo?"})
        await c.until(lambda f: f.get("update_type") == "agent_reason_delta")
        seen: asyncio.Queue[Any] = asyncio.Queue()
        connected = asyncio.ensure_future(_connect(server.address, thread, seen))
        await _until(seen, EventType.REASONING_MESSAGE_CONTENT)  # the run so far, replayed
        # live from here: a stop sent on /ws ends the reconnected stream as cancelled
        await c.send({"type": "agent_control", "action": "stop"})
        events = await asyncio.wait_for(connected, 10)
    check_sequence(events)
    assert events[0].type == EventType.RUN_STARTED
    snapshot = events[1]
    assert [m.content for m in snapshot.messages if m.role == "user"] == [
        "What time is it in Lisbon?",
        "And in Tokyo?",
    ]
    assert len([m for m in snapshot.messages if m.role == "assistant"]) == 2  # the first run's
    thought = "".join(e.delta for e in events if e.type == EventType.REASONING_MESSAGE_CONTENT)
    assert thought.startswith("Thinking it over")  # the run from its start
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].outcome.type == "cancelled"


async def test_a_foreign_or_unknown_thread_is_refused(server: Any) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        body = run_input(uuid.uuid4().hex)
        response = await http.post(f"http://{server.address}/agui/connect", json=body)
    assert response.status_code == 404 and response.json()["code"] == "session_not_found"


async def _connect_agent(address: str, thread: str) -> list[dict[str, Any]]:
    """@ag-ui/client's `connectAgent` on the thread (connect.mjs): the agent's messages."""
    node = shutil.which("node")
    if node is None or not (NPM_DIR / "node_modules/@ag-ui/client").is_dir():
        import pytest

        pytest.skip("node or @ag-ui/client is missing: run scripts/test-deps.sh")
    proc = await asyncio.create_subprocess_exec(
        node,
        SCRIPT,
        str(NPM_DIR),
        f"http://{address}/agui",
        thread,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert out, err.decode()
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert proc.returncode == 0 and report["ok"], (report.get("error"), report.get("rejected"))
    messages: list[dict[str, Any]] = report["messages"]
    return messages


async def test_connect_agent_of_the_sdk_rebuilds_the_conversation(
    server: Any, fake_llm: FakeLLM
) -> None:
    thread, clock = await _first_run(server, fake_llm)
    messages = await _connect_agent(server.address, thread)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["toolCalls"][0]["id"] == clock.id
    assert messages[-1]["content"] == "It is **noon** in Lisbon."


async def test_a_question_answered_before_the_reconnect_is_not_asked_again(
    server: Any, fake_llm: FakeLLM
) -> None:
    ask = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script("act", act(ask))
    fake_llm.script("observe", Reply(chunks=["Lisbon, then"], hang_after=1))
    async with await server.client() as c:
        thread = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "What time is it where I am?"})
        await c.until(lambda f: f.get("update_type") == "agent_request_input")
        await c.send({"type": "agent_user_input", "content": "Lisbon"})
        await c.until(lambda f: f.get("update_type") == "agent_observe_delta")
        seen: asyncio.Queue[Any] = asyncio.Queue()
        connected = asyncio.ensure_future(_connect(server.address, thread, seen))
        await _until(seen, EventType.CUSTOM, "agent_user_answer")
        await c.send({"type": "agent_control", "action": "stop"})
        events = await asyncio.wait_for(connected, 10)
    check_sequence(events)
    assert [e.type for e in events].count(EventType.RUN_FINISHED) == 1
    assert events[-1].outcome.type == "cancelled"  # not an interrupt: it was answered
    thought = "".join(e.delta for e in events if e.type == EventType.REASONING_MESSAGE_CONTENT)
    assert thought.endswith("Lisbon, then")  # the observation after the answer


async def test_the_snapshot_shows_the_versions_shown(server: Any, fake_llm: FakeLLM) -> None:
    """Versions of a turn (wire-protocol.md): the snapshot is the active path, and follows a
    switch."""
    fake_llm.script("chat", Reply(chunks=["Paris."]), Reply(chunks=["Rome."]))
    async with await server.client() as c:
        thread = (await c.recv())["session_id"]
        first = await c.run("France?", agent_mode=False)
        edited = await c.run("Italy?", agent_mode=False, replaces=first[0]["run_id"])

        def texts(events: list[Any]) -> list[str]:
            return [m.content for m in events[1].messages]

        assert texts(await _connect(server.address, thread)) == ["Italy?", "Rome."]
        await c.send({"type": "select_version", "run_id": first[0]["run_id"]})
        await c.until("active_path")
        assert texts(await _connect(server.address, thread)) == ["France?", "Paris."]
    assert edited[0]["replaces"] == first[0]["run_id"]
    sdk = await _connect_agent(server.address, thread)  # @ag-ui/client's connectAgent
    assert [m["content"] for m in sdk] == ["France?", "Paris."]
