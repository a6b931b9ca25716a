"""MCP servers nobody here wrote, through the WebSocket: tools reach the model, a dead server
is reported and restarted, a stop cancels the call, bad names are refused."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from tests.fakes.client import Client, kind
from tests.fakes.mcp_servers import everything_over_http, kill_processes, npm_server, time_server
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe


def _catalog(running):  # the app's ToolCatalog
    return running.app.state.services.tools


async def _wire_until(wire: Path, test, timeout: float = 5.0) -> list[dict]:
    """The messages the server received on stdin, once `test(messages)` holds."""
    async with asyncio.timeout(timeout):
        while True:
            text = await asyncio.to_thread(_read, wire)
            sent = [json.loads(line) for line in text.splitlines() if line.strip()]
            if test(sent):
                return sent
            await asyncio.sleep(0.02)  # polling a file: the server's stdin is copied there


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def _get(address: str, path: str) -> dict:
    async with httpx.AsyncClient(base_url=f"http://{address}") as http:
        response = await http.get(path)
        assert response.status_code == 200, response.text
        return response.json()


async def test_an_mcp_tool_is_listed_called_and_its_result_reaches_the_model(
    server_factory, fake_llm: FakeLLM
):
    call = FakeToolCall("time__get_current_time", {"timezone": "Asia/Tokyo"})
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("Got the time.", final="It is evening in Tokyo."))
    tools = {"enabled": ["get_current_time"], "mcp": {"time": time_server()}}
    async with server_factory(tools=tools) as s:
        health = await _get(s.address, "/healthz")
        assert health["status"] == "ok" and health["mcp"]["time"]["state"] == "up"
        listed = {t["name"]: t for t in (await _get(s.address, "/api/tools"))["tools"]}
        assert listed["get_current_time"]["source"] == "builtin"
        mcp_tool = listed["time__get_current_time"]
        assert mcp_tool["source"] == "mcp:time" and mcp_tool["needs_approval"] is False
        assert "timezone" in mcp_tool["parameters"]["properties"]
        assert mcp_tool["description"] == "Get current time in a specific timezone"

        async with await s.client() as c:
            await c.recv()
            frames = await c.run("What time is it in Tokyo?")
    done = next(f for f in frames if kind(f) == "tool_complete")
    assert done["tool_name"] == "time__get_current_time"
    assert done["result"]["structured"]["timezone"] == "Asia/Tokyo"
    assert frames[-2]["final_answer"] == "It is evening in Tokyo."
    act_request = next(r for r in fake_llm.requests if r.phase == "act")
    offered = {t["function"]["name"] for t in act_request.body["tools"]}
    assert {"get_current_time", "time__get_current_time", "time__convert_time"} <= offered
    observe_request = next(r for r in fake_llm.requests if r.phase == "observe")
    tool_message = next(m for m in observe_request.body["messages"] if m["role"] == "tool")
    assert "Asia/Tokyo" in tool_message["content"]


async def test_chat_tools_picks_mcp_tools_and_names_every_unknown_one(
    server_factory, fake_llm: FakeLLM
):
    tools = {"enabled": ["get_current_time"], "mcp": {"time": time_server()}}
    async with server_factory(tools=tools) as s, await s.client() as c:
        await c.recv()
        await c.send({"type": "chat", "content": "hi", "tools": ["nope", "time__nope"]})
        error = await c.recv()
        assert error["code"] == "invalid_message"
        assert "'nope'" in error["message"] and "'time__nope'" in error["message"]
        await c.run("only the MCP tool", tools=["time__convert_time"])
    act_request = next(r for r in fake_llm.requests if r.phase == "act")
    assert [t["function"]["name"] for t in act_request.body["tools"]] == [
        "time__convert_time",
        "request_input",
    ]


async def test_a_server_that_cannot_start_is_reported_and_the_rest_works(server_factory):
    tools = {
        "mcp": {
            "broken": {"command": "/nonexistent/mcp-server", "restart_backoff_s": 30},
            "time": time_server(),
        }
    }
    async with server_factory(tools=tools) as s:
        health = await _get(s.address, "/healthz")
        assert health["status"] == "degraded"
        assert health["mcp"]["broken"]["state"] == "down"
        assert "/nonexistent/mcp-server" in health["mcp"]["broken"]["error"]
        assert health["mcp"]["time"]["state"] == "up"
        names = [t["name"] for t in (await _get(s.address, "/api/tools"))["tools"]]
        assert "time__get_current_time" in names
        assert not [n for n in names if n.startswith("broken__")]


async def test_healthz_names_the_servers_only_to_an_operator(server_factory):
    """No token is needed for /healthz, so its detail (server names and errors, some of them
    one tenant's) goes to an operator only."""
    tokens = {
        "tenant-token-0123456789": {"tenant": "acme", "user": "alice"},
        "operator-token-0123456789": {"tenant": "ops", "user": "olga", "operator": True},
    }
    broken = {"command": "/nonexistent/payroll-mcp", "restart_backoff_s": 30}
    async with server_factory(tools={"mcp": {"payroll": broken}}, auth={"tokens": tokens}) as s:
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            anyone = (await http.get("/healthz")).json()
            tenant = await http.get("/healthz", headers=_bearer("tenant-token-0123456789"))
            operator = await http.get("/healthz", headers=_bearer("operator-token-0123456789"))
    assert anyone == tenant.json() == {"status": "degraded"}
    assert operator.json()["mcp"]["payroll"]["state"] == "down"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_server_killed_mid_call_gives_tool_error_and_comes_back(
    server_factory, fake_llm: FakeLLM
):
    slow = FakeToolCall("every__trigger-long-running-operation", {"duration": 30, "steps": 30})
    fake_llm.script("act", act(slow))
    server = npm_server("everything", restart_backoff_s=0.1)
    async with server_factory(tools={"enabled": [], "mcp": {"every": server}}) as s:
        mcp = _catalog(s).servers["every"]
        async with await s.client() as c:
            await c.recv()
            await c.send({"type": "chat", "content": "run the slow thing"})
            await c.until("tool_start")
            assert kill_processes("mcp-server-everything")
            frames = await c.until("tool_error", timeout=10)
            assert "stopped during the call" in frames[-1]["error"]
            await c.until("response_complete")
            await asyncio.wait_for(mcp.wait_up(), 15)
            assert mcp.restarts >= 1
            health = await _get(s.address, "/healthz")
            assert health["status"] == "ok" and health["mcp"]["every"]["restarts"] >= 1
            echo = FakeToolCall("every__echo", {"message": "back"})
            fake_llm.script("act", act(echo))
            frames = await c.run("echo please")
    done = next(f for f in frames if kind(f) == "tool_complete")
    assert "back" in json.dumps(done["result"])


async def test_stop_during_a_long_mcp_call_ends_the_run_and_cancels_the_request(
    server_factory, fake_llm: FakeLLM, tmp_path: Path
):
    wire = tmp_path / "wire.jsonl"
    slow = FakeToolCall("every__trigger-long-running-operation", {"duration": 30, "steps": 30})
    fake_llm.script("act", act(slow))
    server = npm_server("everything", wire_log=wire)
    async with server_factory(tools={"enabled": [], "mcp": {"every": server}}) as s:
        async with await s.client() as c:
            await c.recv()
            await c.send({"type": "chat", "content": "run the slow thing"})
            await c.until("tool_start")
            await _wire_until(wire, lambda sent: any(_is_call(m) for m in sent))
            await c.send({"type": "agent_control", "action": "stop"})
            frames = await c.until("response_complete")  # long before the call's 30 s
            assert [kind(f) for f in frames] == ["tool_error", "agent_stopped", "response_complete"]
        sent = await _wire_until(wire, lambda sent: any(_is_cancel(m) for m in sent))
        call = next(m for m in sent if _is_call(m))
        cancel = next(m for m in sent if _is_cancel(m))
        assert cancel["params"]["requestId"] == call["id"]


def _is_call(message: dict) -> bool:
    return message.get("method") == "tools/call"


def _is_cancel(message: dict) -> bool:
    return message.get("method") == "notifications/cancelled"


ACME = "acme-token-0123456789"
OTHER = "other-token-0123456789"


async def test_streamable_http_server_with_env_headers_seen_only_by_its_tenants(
    server_factory, fake_llm: FakeLLM, monkeypatch
):
    monkeypatch.setenv("MCP_TEST_TOKEN", "Bearer not-in-the-file")
    auth = {
        "tokens": {
            ACME: {"tenant": "acme", "user": "alice"},
            OTHER: {"tenant": "other", "user": "bob"},
        }
    }
    async with everything_over_http() as url:
        server = {"url": url, "headers_env": {"Authorization": "MCP_TEST_TOKEN"}}
        server["tenants"] = ["acme"]
        async with server_factory(auth=auth, tools={"enabled": [], "mcp": {"every": server}}) as s:
            configured = s.settings.tools.mcp["every"].headers["Authorization"]
            assert configured.get_secret_value() == "Bearer not-in-the-file"
            async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
                mine = await http.get("/api/tools", headers={"Authorization": f"Bearer {ACME}"})
                theirs = await http.get("/api/tools", headers={"Authorization": f"Bearer {OTHER}"})
            assert "every__echo" in [t["name"] for t in mine.json()["tools"]]
            assert theirs.json() == {"tools": []}

            async with await s.client(token=OTHER) as c:
                await c.recv()
                await c.send({"type": "chat", "content": "hi", "tools": ["every__echo"]})
                assert (await c.recv())["code"] == "invalid_message"

            fake_llm.script("act", act(FakeToolCall("every__echo", {"message": "over http"})))
            async with await s.client(token=ACME) as c:
                await c.recv()
                frames = await c.run("echo")
    done = next(f for f in frames if kind(f) == "tool_complete")
    assert "over http" in json.dumps(done["result"])


async def test_elicitation_is_answered_through_agent_user_input_or_times_out(
    server_factory, fake_llm: FakeLLM
):
    """Also: the call's time limit waits while the person answers, and a call that hangs
    past it is a tool_error while the server stays usable."""
    first = FakeToolCall("every__trigger-elicitation-request", {})
    second = FakeToolCall("every__trigger-elicitation-request", {})
    slow = FakeToolCall("every__trigger-long-running-operation", {"duration": 30, "steps": 30})
    echo = FakeToolCall("every__echo", {"message": "still here"})
    fake_llm.script("act", act(first), act(second), act(slow), act(echo))
    tools = {"enabled": [], "mcp": {"every": npm_server("everything")}}
    agent = {"request_input_timeout_s": 1.5, "tool_timeout_s": 0.5}
    async with server_factory(tools=tools, agent=agent) as s, await s.client() as c:
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "sign me up"})
        frames = await c.until("agent_request_input", timeout=10)
        asked = frames[-1]
        assert asked["tool_call_id"] == first.id and asked["tool_name"] == first.name
        assert "Please provide inputs" in asked["question"] and "'name'" in asked["question"]
        async with await s.client(session_id=session) as other:
            hello = await other.recv()
            assert hello["status"] == "awaiting_input"
            assert hello["pending_input"]["tool_call_id"] == first.id
        # A person's pace, not synchronization: longer than the call's own 0.5 s limit,
        # which must not run while the question waits.
        await asyncio.sleep(0.8)
        await c.send({"type": "agent_user_input", "content": "Ada Lovelace"})
        frames = await c.until("tool_complete", timeout=10)
        assert "Name: Ada Lovelace" in json.dumps(frames[-1]["result"])
        # Every tab sees the answer taken, as for the model's own request_input.
        (answered,) = [f for f in frames if kind(f) == "agent_user_answer"]
        assert answered["content"] == "Ada Lovelace" and answered["tool_call_id"] == first.id
        await c.until("response_complete")

        await c.send({"type": "chat", "content": "again"})
        await c.until("agent_request_input", timeout=10)
        frames = await c.until("response_complete", timeout=10)
        assert [kind(f) for f in frames] == [
            "agent_request_input_timeout",
            "tool_error",
            "agent_stopped",
            "response_complete",
        ]
        assert frames[2]["reason"] == "input_timeout"

        fake_llm.script("observe", observe("Too slow."), observe("Fine.", final="Done."))
        frames = await c.run("slow then echo")
    failed = next(f for f in frames if kind(f) == "tool_error")
    assert failed["tool_call_id"] == slow.id and "did not finish within 0.5 s" in failed["error"]
    done = next(f for f in frames if kind(f) == "tool_complete")
    assert done["tool_call_id"] == echo.id and "still here" in json.dumps(done["result"])


async def test_a_result_too_big_for_a_frame_is_cut_and_a_default_client_reads_the_run(
    server_factory, fake_llm: FakeLLM, tmp_path: Path
):
    root = (tmp_path / "files").resolve()
    root.mkdir()
    (root / "big.log").write_text("entry\n" * 400_000)  # 2.4 MB: more than a frame may carry
    call = FakeToolCall("fs__read_text_file", {"path": str(root / "big.log")})
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("Read it.", final="It is a log of entries."))
    tools = {"enabled": ["get_current_time"], "mcp": {"fs": npm_server("filesystem", str(root))}}
    async with server_factory(tools=tools) as s:
        # websockets' own default: a message over 1 MiB closes the connection (1009)
        async with connect(f"ws://{s.address}/ws", open_timeout=5) as ws:
            c = Client(ws)
            await c.recv()
            frames = await c.run("What is in big.log?", timeout=20)
    done = next(f for f in frames if kind(f) == "tool_complete")
    result = done["result"]  # the server's text (and its structured copy) as JSON text, cut
    assert isinstance(result, str) and "entry" in result[:40]
    assert re.search(r"\[Cut here: the result had [\d,]+ bytes as JSON; .+ beginning\.\]$", result)
    assert len(json.dumps(done).encode()) < 300_000
    assert frames[-2]["final_answer"] == "It is a log of entries."
    observe_request = next(r for r in fake_llm.requests if r.phase == "observe")
    tool_message = next(m for m in observe_request.body["messages"] if m["role"] == "tool")
    assert "entry" in tool_message["content"][:40]  # what was kept, as the context shows it
