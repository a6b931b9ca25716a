"""Fault injection: a hanging or babbling LLM, a dead process, a store that cannot write."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette

from server.runner import AgentServer
from server.services import Services
from server.settings import Settings
from tests.fakes.client import Client, kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act
from tests.fakes.processes import free_port, start_server_process

REPO = Path(__file__).resolve().parents[2]


async def test_an_llm_that_hangs_past_the_timeout_ends_the_run(server_factory, fake_llm):
    fake_llm.script("reason", Reply(chunks=["never"], hang_after=0))
    async with server_factory(llm={"timeout_s": 0.5, "max_retries": 0}) as s:
        async with await s.client() as c:
            await c.recv()
            frames = await c.run("hello", timeout=10)
            assert frames[-2]["code"] == "llm_error"
            assert frames[-2]["message"] == (  # not "could not be reached": it was
                "The language model sent nothing for longer than llm.timeout_s (0.5 s) "
                "while writing its reply."
            )
            assert kind(frames[-1]) == "response_complete"
            assert kind((await c.run("again"))[-2]) == "agent_completion"


@pytest.mark.parametrize(
    "garbage",
    [
        b"data: {not json\n\n",
        b"this is not server-sent events at all",
        b'data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n',
    ],
)
async def test_garbage_from_the_llm_is_an_llm_error(server, fake_llm: FakeLLM, garbage):
    fake_llm.script("reason", Reply(raw=garbage))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hello")
    assert kind(frames[-1]) == "response_complete"
    codes = [f.get("code") for f in frames if f["type"] == "error"]
    # An unreadable stream fails the run, and says so: never a silently empty answer.
    assert codes == ["llm_error"]
    assert not [f for f in frames if kind(f) == "agent_completion"]


async def test_tool_call_with_garbage_name_and_arguments(server, fake_llm: FakeLLM):
    fake_llm.script("act", act(FakeToolCall("", "\x00\x01 not json"), FakeToolCall("x" * 300, "")))
    async with await server.client() as c:
        await c.recv()
        frames = await c.run("hello")
    errors = [f for f in frames if f["type"] == "tool_error"]
    assert len(errors) == 2
    assert frames[-2]["update_type"] == "agent_completion"


async def test_a_full_database_fails_the_run_with_storage_error_and_recovers(
    server_factory, fake_llm
):
    async with server_factory() as s:
        store = s.app.state.services.store
        async with await s.client() as c:
            await c.recv()
            await c.run("first")
            fake_llm.script("reason", Reply(chunks=["word "] * 2000))  # needs new pages to store

            def cap(size: int | None) -> None:
                conn = store._write_conn  # the disk "fills up" under the server's connection
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                conn.execute(f"PRAGMA max_page_count = {size or pages}")

            await store._in_writer(cap, None)
            frames = await c.run("second", timeout=30)
            assert [f["code"] for f in frames if f["type"] == "error"] == ["storage_error"]
            # The run's end is always sent; whether it could be stored depends on the room left
            # in pages already allocated, so its `seq` is not asserted.
            assert kind(frames[-1]) == "response_complete"
            assert not [f for f in frames if kind(f) in ("agent_completion", "chat_done")]
            await store._in_writer(cap, 1_000_000)  # space again
            assert kind((await c.run("third"))[-2]) == "agent_completion"


async def _start_server(tmp_path: Path, port: int, llm_url: str) -> asyncio.subprocess.Process:
    env = {
        "AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "agent.db"),
        "AGENT__LLM__BASE_URL": llm_url,
        "AGENT__LLM__MAX_RETRIES": "0",
    }
    return await start_server_process(tmp_path, port, env)


@pytest.mark.slow
async def test_a_killed_process_leaves_runs_that_the_next_start_closes(fake_llm, tmp_path):
    port = free_port()
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Still there?"})))
    proc = await _start_server(tmp_path, port, fake_llm.base_url)
    try:
        c = await Client.connect(f"127.0.0.1:{port}")
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "ask me something"})
        seen = await c.until("agent_request_input")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await c.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    proc = await _start_server(tmp_path, port, fake_llm.base_url)
    try:
        async with await Client.connect(
            f"127.0.0.1:{port}", session_id=session, after_seq=seen[-1]["seq"]
        ) as again:
            hello = await again.recv()
            assert hello["status"] == "idle" and hello["pending_input"] is None
            tail = await again.until("response_complete")
            assert [kind(f) for f in tail] == ["agent_stopped", "response_complete"]
            assert tail[0]["reason"] == "interrupted" and tail[0]["step"] == 1
            frames = await again.run("are you back?")
            assert kind(frames[-2]) == "agent_completion"
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 20)
    act_request = [r for r in fake_llm.requests if r.phase == "act"][-1]
    tool = [m for m in act_request.body["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and "server running" in tool[0]["content"]


@pytest.mark.slow
async def test_shutdown_takes_one_timeout_even_with_a_client_that_never_reads(fake_llm, tmp_path):
    """SIGTERM while a client that never reads is sent a replay: the process exits within
    about `server.shutdown_timeout_s` (it waited that long for the sockets, then uvicorn
    waited as long again)."""
    fake_llm.script("reason", *[Reply(chunks=["x" * 3999 + " "] * 45)] * 12)  # ~2 MB stored
    port = free_port()
    env = {
        "AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "agent.db"),
        "AGENT__LLM__BASE_URL": fake_llm.base_url,
        "AGENT__SERVER__SHUTDOWN_TIMEOUT_S": "2",
    }
    proc = await start_server_process(tmp_path, port, env)
    stalled = socket.socket()
    try:
        async with await Client.connect(f"127.0.0.1:{port}") as c:
            session = (await c.recv())["session_id"]
            for n in range(12):
                await c.run(f"a long answer {n}", timeout=30)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(stalled, ("127.0.0.1", port))
        upgrade = (
            f"GET /ws?session_id={session}&after_seq=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        await loop.sock_sendall(stalled, upgrade.encode())
        await loop.sock_recv(stalled, 1)  # the replay has begun, and is never read further
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        stalled.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn raises the signal again at the end


async def test_uvicorn_waits_only_for_what_is_left_of_the_one_shutdown_timeout(monkeypatch):
    """When stopping the runs took all of `server.shutdown_timeout_s` (a client that never
    reads), uvicorn's own wait for open sockets gets the floor (0.1 s), not a second timeout."""

    class Hub:
        async def shutdown(self, timeout: float) -> None:
            await asyncio.sleep(timeout)  # the whole timeout, spent on a stalled socket

    settings = Settings(server={"shutdown_timeout_s": 0.2})
    app = Starlette()
    app.state.services = Services(settings=settings, store=None, hub=Hub(), auth=None)  # type: ignore[arg-type]
    handed_over: list[float] = []

    async def uvicorn_shutdown(self: uvicorn.Server, sockets: object = None) -> None:
        handed_over.append(self.config.timeout_graceful_shutdown)

    monkeypatch.setattr(uvicorn.Server, "shutdown", uvicorn_shutdown)
    server = AgentServer(uvicorn.Config(app, timeout_graceful_shutdown=2))
    server.servers = []  # uvicorn's listening sockets, none here
    await server.shutdown()
    assert handed_over == [0.1]
