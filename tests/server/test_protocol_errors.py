"""Every error code of docs/wire-protocol.md, and that none of them closes the connection."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.fakes.client import Client, kind
from tests.fakes.openai_server import FakeLLM, Reply


async def _error(c: Client, frame) -> dict:
    await c.send(frame)
    reply = await c.recv()
    assert reply["type"] == "error", reply
    assert set(reply) == {"type", "code", "message"} and reply["message"]
    return reply


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ('"chat"', "invalid_json"),
        ({"content": "hi"}, "unknown_type"),
        ({"type": "dance"}, "unknown_type"),
        ({"type": 5}, "unknown_type"),
        ({"type": "dance", "id": 5}, "unknown_type"),  # the type is checked before the id
        ({"type": "chat"}, "invalid_message"),
        ({"type": "chat", "content": ""}, "invalid_message"),
        ({"type": "chat", "content": "   "}, "invalid_message"),
        ({"type": "chat", "content": 5}, "invalid_message"),
        ({"type": "chat", "content": "hi", "agent_max_steps": 0}, "invalid_message"),
        ({"type": "chat", "content": "hi", "agent_max_steps": "abc"}, "invalid_message"),
        ({"type": "chat", "content": "hi", "agent_max_steps": "3"}, "invalid_message"),
        ({"type": "chat", "content": "hi", "agent_max_steps": True}, "invalid_message"),
        ({"type": "chat", "content": "hi", "agent_max_steps": 2.5}, "invalid_message"),
        ({"type": "chat", "content": "hi", "agent_max_steps": 51}, "invalid_message"),
        ({"type": "chat", "content": "hi", "agent_mode": "yes"}, "invalid_message"),
        ({"type": "chat", "content": "hi", "tools": "get_current_time"}, "invalid_message"),
        ({"type": "chat", "content": "hi", "tools": ["nope"]}, "invalid_message"),
        ({"type": "agent_control"}, "invalid_message"),
        ({"type": "agent_control", "action": "pause"}, "invalid_message"),
        ({"type": "agent_user_input"}, "invalid_message"),
        ({"type": "agent_user_input", "content": 1}, "invalid_message"),
        ({"type": "agent_control", "action": "stop"}, "no_active_run"),
        ({"type": "agent_user_input", "content": "hi"}, "not_awaiting_input"),
    ],
)
async def test_bad_frames_get_their_error_code_and_change_nothing(server, frame, code):
    async with await server.client() as c:
        hello = await c.recv()
        assert (await _error(c, frame))["code"] == code
        frames = await c.run("still works")  # the connection and session are intact
        assert frames[0]["seq"] == hello["last_seq"] + 1


async def test_error_messages_say_what_was_expected(server):
    async with await server.client() as c:
        await c.recv()
        steps = await _error(c, {"type": "chat", "content": "x", "agent_max_steps": 60})
        assert "at most 50" in steps["message"] and "60" in steps["message"]
        typed = await _error(c, {"type": "chat", "content": "x", "agent_max_steps": "3"})
        assert "agent_max_steps" in typed["message"] and '"3"' in typed["message"]


_LONG = 300_000  # items or characters: the frames below are 0.3-1 MB, under the 1 MiB limit


@pytest.mark.parametrize(
    ("frame", "code", "said"),
    [
        ({"type": "x" * _LONG}, "unknown_type", "300000 characters"),
        ({"type": "chat", "content": "hi", "agent_mode": "y" * _LONG}, "invalid_message", "…"),
        ({"type": "chat", "content": "hi", "tools": [1] * _LONG}, "invalid_message", "at most"),
        (
            {"type": "chat", "content": "hi", "tools": ["n" * _LONG]},
            "invalid_message",
            "300000 characters",
        ),
        (
            {"type": "agent_tool_decision", "tool_call_id": "c" * _LONG, "approve": True},
            "not_awaiting_approval",
            "",
        ),
    ],
)
async def test_an_error_never_hands_a_long_input_back(server, frame, code, said):
    """A frame near the size limit answered with its own value quoted (or a line per wrong
    item) would be an error frame many times its size: a client library closes on it, and
    the server spends a second building it."""
    async with await server.client() as c:
        await c.recv()
        await c.send(frame)
        raw = await asyncio.wait_for(c.ws.recv(), 5)
        error = json.loads(raw)
        assert (error["type"], error["code"]) == ("error", code)
        assert len(raw) < 2000 and said in error["message"], error["message"]
        frames = await c.run("still works")
        assert frames[-1]["type"] == "response_complete"


async def test_run_in_progress_and_a_binary_frame(server, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(chunks=["slow"], hang_after=0))
    async with await server.client() as c:
        await c.recv()
        await c.send({"type": "chat", "content": "first"})
        await c.until("agent_turn_start")
        assert (await _error(c, {"type": "chat", "content": "second"}))["code"] == "run_in_progress"
        await c.ws.send(b"\x00\x01")
        assert (await c.recv())["code"] == "invalid_json"
        await c.send({"type": "agent_control", "action": "stop"})
        await c.until("response_complete")


async def test_too_many_runs_per_tenant(server_factory, fake_llm: FakeLLM):
    fake_llm.script("reason", Reply(chunks=["a"], hang_after=0), Reply(chunks=["b"], hang_after=0))
    async with server_factory(agent={"max_concurrent_runs_per_tenant": 2}) as s:
        clients = [await s.client() for _ in range(3)]
        for c in clients:
            await c.recv()
        for c in clients[:2]:
            await c.send({"type": "chat", "content": "busy"})
            await c.until("agent_turn_start")
        assert (await _error(clients[2], {"type": "chat", "content": "one more"}))["code"] == (
            "too_many_runs"
        )
        await clients[0].send({"type": "agent_control", "action": "stop"})
        await clients[0].until("response_complete")
        frames = await clients[2].run("now there is room")
        assert kind(frames[-1]) == "response_complete"
        await clients[1].send({"type": "agent_control", "action": "stop"})
        await clients[1].until("response_complete")
        for c in clients:
            await c.close()


async def test_unknown_or_foreign_session_is_refused_with_4404(server):
    async with await server.client(session_id="does-not-exist") as c:
        error = await c.recv()
        assert error == {"type": "error", "code": "session_not_found", "message": error["message"]}
        with pytest.raises(ConnectionClosed) as closed:
            await c.recv()
        assert closed.value.rcvd.code == 4404


async def test_a_frame_over_the_limit_closes_with_1009(server_factory):
    async with server_factory(server={"max_message_bytes": 2048}) as s:
        async with await s.client() as c:
            await c.recv()
            await c.send({"type": "chat", "content": "x" * 1000})  # under the limit: fine
            await c.until("response_complete")
            with pytest.raises(ConnectionClosed) as closed:
                await c.send({"type": "chat", "content": "x" * 5000})
                await c.recv()
            assert closed.value.rcvd.code == 1009
        async with await s.client() as c:  # the server keeps serving
            assert (await c.recv())["type"] == "session"


async def test_origin_not_allowed_is_refused_before_upgrade(server):
    errors: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = errors.append  # type: ignore[method-assign]
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addHandler(handler)
    try:
        with pytest.raises(InvalidStatus) as refused:
            await Client.connect(server.address, headers={"Origin": "http://evil.example"})
    finally:
        uvicorn_log.removeHandler(handler)
    assert errors == []  # a refusal is not an error of the server (uvicorn logged one)
    assert refused.value.response.status_code == 403
    assert json.loads(refused.value.response.body)["code"] == "origin_not_allowed"  # says why
    ok = await Client.connect(server.address, headers={"Origin": "http://localhost:8765"})
    assert (await ok.recv())["type"] == "session"
    await ok.close()


async def test_a_chat_whose_echo_would_pass_the_limit_is_refused_and_one_that_fits_runs(
    server_factory, fake_llm: FakeLLM
):
    """A client whose library takes frames as large as the limit it sends within (as
    `websockets`' default 1 MiB is the server's default) never gets a frame it closes on."""
    fake_llm.script("chat", Reply(chunks=["ok"]))
    limit = 4096
    async with server_factory(server={"max_message_bytes": limit}) as s:
        url = f"ws://{s.address}/ws"
        async with connect(url, max_size=limit) as ws:
            session = json.loads(await ws.recv())
            big = {"type": "chat", "content": "é" * 1990, "agent_mode": False, "id": "c1"}
            assert len(json.dumps(big, ensure_ascii=False).encode()) < limit  # a frame it may send
            await ws.send(json.dumps(big, ensure_ascii=False))
            error = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert (error["type"], error["code"], error["id"]) == ("error", "invalid_message", "c1")
            room = int(re.search(r"at most (\d+)", error["message"])[1])
            assert f"{limit} bytes" in error["message"]
            fits = {**big, "content": "é" * (room // 2)}
            await ws.send(json.dumps(fits, ensure_ascii=False))
            frames = [json.loads(await asyncio.wait_for(ws.recv(), 5))]
            while frames[-1]["type"] != "response_complete":
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 5)))
        echo = frames[0]
        assert echo["update_type"] == "agent_user_message" and echo["content"] == fits["content"]
        assert [f["type"] for f in frames].count("chat_response") == 1
        query = f"session_id={session['session_id']}&after_seq=0"
        async with connect(f"{url}?{query}", max_size=limit) as ws:  # and so does a replay
            await ws.recv()
            replayed = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert replayed == echo
