"""Approval before risky calls, against the real filesystem MCP server on a temporary folder:
approve, deny, time out, stop, reconnect while pending, and the precise errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from server.app import create_app
from server.settings import ConfigError, load_settings
from tests.fakes.client import kind
from tests.fakes.mcp_servers import npm_server
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe


def _tools(root: Path, **extra) -> dict:
    return {
        "enabled": ["get_current_time"],
        "mcp": {"fs": npm_server("filesystem", str(root))},
        **extra,
    }


def _write(root: Path, name: str = "note.txt") -> FakeToolCall:
    return FakeToolCall("fs__write_file", {"path": str(root / name), "content": "hello"})


def _decision(call: FakeToolCall | str, approve: bool, **extra) -> dict:
    call_id = call if isinstance(call, str) else call.id
    return {"type": "agent_tool_decision", "tool_call_id": call_id, "approve": approve, **extra}


async def test_approve_after_a_reconnect_runs_the_call_and_errors_are_precise(
    server_factory, fake_llm: FakeLLM, tmp_path: Path
):
    root = (tmp_path / "files").resolve()
    root.mkdir()
    call = _write(root)
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("Written.", final="Saved note.txt.", delay_s=0.2))
    async with server_factory(tools=_tools(root)) as s:
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            listed = {t["name"]: t for t in (await http.get("/api/tools")).json()["tools"]}
        assert listed["fs__write_file"]["needs_approval"] is True  # destructiveHint
        assert listed["fs__read_text_file"]["needs_approval"] is False
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            await c.send(_decision("nothing-yet", True))
            assert (await c.recv())["code"] == "not_awaiting_approval"
            await c.send({"type": "chat", "content": "save a note"})
            frames = await c.until("agent_tool_approval")
            asked = frames[-1]
            assert asked["tool_call_id"] == call.id and asked["tool_name"] == "fs__write_file"
            assert asked["arguments"] == call.arguments and asked["step"] == 1
            assert asked["expires_at"] > asked["ts"]
            assert [kind(f) for f in frames].count("tool_start") == 1
            assert not (root / "note.txt").exists()

        async with await s.client(session_id=session) as again:
            hello = await again.recv()
            assert hello["status"] == "awaiting_approval" and hello["pending_input"] is None
            assert hello["pending_approval"] == {
                "tool_name": "fs__write_file",
                "arguments": call.arguments,
                "tool_call_id": call.id,
                "step": 1,
                "expires_at": asked["expires_at"],
            }
            await again.send(_decision("call_wrong", True))
            wrong = await again.recv()
            assert wrong["code"] == "unknown_tool_call" and call.id in wrong["message"]
            await again.send(_decision("c" * 500_000, True))  # not handed back whole
            long = await again.recv()
            assert long["code"] == "unknown_tool_call" and len(long["message"]) < 300
            await again.send({"type": "agent_tool_decision", "tool_call_id": call.id})
            assert (await again.recv())["code"] == "invalid_message"
            await again.send(_decision(call, True))
            await again.until("tool_complete", timeout=10)
            await again.until("agent_observe_delta")  # the run goes on: two chunks to come
            await again.send(_decision(call, False))
            rest = await again.until("response_complete")
            errors = [f for f in rest if f["type"] == "error"]
            assert [e["code"] for e in errors] == ["already_decided"]
    assert (root / "note.txt").read_text() == "hello"


async def test_a_denial_becomes_the_result_and_the_run_goes_on(
    server_factory, fake_llm: FakeLLM, tmp_path: Path
):
    root = (tmp_path / "files").resolve()
    root.mkdir()
    call = _write(root)
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("Declined.", final="I did not write the note."))
    async with server_factory(tools=_tools(root)) as s, await s.client() as c:
        await c.recv()
        await c.send({"type": "chat", "content": "save a note"})
        await c.until("agent_tool_approval")
        await c.send(_decision(call, False, reason="not in that folder"))
        frames = await c.until("response_complete")
        failed = next(f for f in frames if kind(f) == "tool_error")
        assert failed["error"] == "The user declined: not in that folder."
        assert frames[-2]["final_answer"] == "I did not write the note."
        await c.send(_decision(call, True))
        assert (await c.recv())["code"] == "not_awaiting_approval"
    assert not (root / "note.txt").exists()
    observe_request = next(r for r in fake_llm.requests if r.phase == "observe")
    tool_message = next(m for m in observe_request.body["messages"] if m["role"] == "tool")
    assert "The user declined: not in that folder." in tool_message["content"]


async def test_no_decision_in_time_or_a_stop_ends_the_run(
    server_factory, fake_llm: FakeLLM, tmp_path: Path
):
    root = (tmp_path / "files").resolve()
    root.mkdir()
    first, second = _write(root, "a.txt"), _write(root, "b.txt")
    fake_llm.script("act", act(first))
    fake_llm.script("act", act(second))
    tools = _tools(root, approval_timeout_s=0.3)
    async with server_factory(tools=tools) as s, await s.client() as c:
        await c.recv()
        await c.send({"type": "chat", "content": "save a note"})
        await c.until("agent_tool_approval")
        frames = await c.until("response_complete")
        assert [kind(f) for f in frames] == [
            "agent_tool_approval_timeout",
            "tool_error",
            "agent_stopped",
            "response_complete",
        ]
        assert frames[0]["tool_call_id"] == first.id
        assert frames[2]["reason"] == "input_timeout"

        await c.send({"type": "chat", "content": "try again"})
        await c.until("agent_tool_approval")
        started = asyncio.get_running_loop().time()
        await c.send({"type": "agent_control", "action": "stop"})
        frames = await c.until("response_complete")
        assert asyncio.get_running_loop().time() - started < 1.0
        assert [kind(f) for f in frames] == ["tool_error", "agent_stopped", "response_complete"]
        assert frames[1]["reason"] == "user"
    assert not list(root.iterdir())


async def test_config_marks_built_in_tools_and_refuses_unknown_names(
    server_factory, fake_llm: FakeLLM, tmp_path: Path
):
    call = FakeToolCall("get_current_time", {"timezone": "UTC"})
    fake_llm.script("act", act(call))
    async with server_factory(tools={"approval": ["get_current_time"]}) as s:
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            listed = (await http.get("/api/tools")).json()["tools"]
        assert [(t["name"], t["needs_approval"]) for t in listed] == [("get_current_time", True)]
        async with await s.client() as c:
            await c.recv()
            await c.send({"type": "chat", "content": "time?"})
            await c.until("agent_tool_approval")
            await c.send(_decision(call, True))
            frames = await c.until("response_complete")
            assert "tool_complete" in [kind(f) for f in frames]
    settings = load_settings(
        None,
        {"tools": {"approval": ["rm_rf"]}, "storage": {"sqlite_path": str(tmp_path / "x.db")}},
    )
    with pytest.raises(ConfigError, match="tools.approval: unknown tool 'rm_rf'"):
        create_app(settings)
