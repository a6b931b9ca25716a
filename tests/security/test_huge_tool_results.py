"""A huge MCP answer fails its own call, not the server (issue 42, MEDIUM).

An MCP tool answering 20 MB cost 12.7 s of CPU in the SDK's stdio reader (the square of the
size), on the event loop: every tenant waited, the health check timed out and the server was
restarted, its tools gone for everyone.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from agent.errors import ToolError
from agent.tools.config import McpServerConfig
from agent.tools.mcp import McpServer
from agent.tools.mcp_stdio import TooLong, read_lines
from tests.conftest import ServerFactory
from tests.fakes.client import Client, kind
from tests.fakes.mcp_raw import mcp_raw_server
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe

TOKENS = {
    "tenant-a-token-0123456789": {"tenant": "a", "user": "alice"},
    "tenant-b-token-0123456789": {"tenant": "b", "user": "bob"},
    "operator-token-0123456789": {"tenant": "ops", "user": "olga", "operator": True},
}


@asynccontextmanager
async def raw_server(**extra: Any) -> AsyncIterator[McpServer]:
    server = McpServer("raw", McpServerConfig(**mcp_raw_server(), **extra))
    server.start()
    try:
        await server.wait_started()
        yield server
    finally:
        await server.stop()


@pytest.mark.parametrize("where", ["first", "tail"])
async def test_an_answer_over_the_cap_fails_its_call_and_the_server_stays_up(where: str) -> None:
    async with raw_server() as server:
        huge = server.tools["raw__huge"]
        with pytest.raises(ToolError) as failed:
            async with asyncio.timeout(30):
                await server.call(huge, {"text": f"20 {where}"}, None)
        assert "its answer was 20,000,0" in str(failed.value)  # 20 MB and the JSON around it
        assert "more than this server may send (max_message_bytes, 8,388,608)" in str(failed.value)
        assert await server.call(server.tools["raw__echo"], {"text": "on"}, None) == "echo: on"
        assert server.state == "up" and server.restarts == 0


async def test_an_answer_under_the_cap_arrives_whole() -> None:
    async with raw_server(max_message_bytes=6_000_000) as server:
        text = await server.call(server.tools["raw__huge"], {"text": "5"}, None)
        assert text == "x" * 5_000_000


class Chunks:
    """A byte stream cut where the test says."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None


async def test_lines_are_split_however_the_reads_cut_them() -> None:
    long = b'{"jsonrpc": "2.0", "id": 7, "result": "' + b"y" * 5000 + b'"}'
    stream = Chunks(b"a\nb", b"c\n", long[:3000], long[3000:] + b"\n\nlast", b"\n")
    lines = [line async for line in read_lines(stream, 4096)]  # type: ignore[arg-type]
    assert lines[:2] == [b"a", b"bc"] and lines[3:] == [b"", b"last"]
    over = lines[2]
    assert isinstance(over, TooLong) and over.size == len(long) and over.request_id() == 7
    tail_id = b'{"result": "' + b"z" * 5000 + b'", "id": "q-1", "jsonrpc": "2.0"}\n'
    (line,) = [x async for x in read_lines(Chunks(tail_id), 4096)]  # type: ignore[arg-type]
    assert isinstance(line, TooLong) and line.request_id() == "q-1"
    nested = b'{"result": {"id": 3, "v": "' + b"z" * 5000 + b'"}}\n'
    (line,) = [x async for x in read_lines(Chunks(nested), 4096)]  # type: ignore[arg-type]
    assert isinstance(line, TooLong) and line.request_id() is None  # an inner id is no id


async def test_a_huge_answer_in_a_run_leaves_the_server_to_the_other_tenant(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    """Tenant a's model asks for 20 MB; tenant b's run, which calls the same server, completes
    meanwhile, /healthz is answered throughout, and the server is never restarted."""

    def by_tenant(attack: Reply, other: Reply) -> Any:
        return lambda body: attack if "be huge" in json.dumps(body["messages"]) else other

    calls = by_tenant(
        act(FakeToolCall("raw__huge", {"text": "20"})),
        act(FakeToolCall("raw__echo", {"text": "still here"})),
    )
    fake_llm.script("act", calls, calls)
    done = observe("Done.", final="Done.")
    fake_llm.script("observe", *[by_tenant(done, done)] * 2)
    tools = {"enabled": [], "mcp": {"raw": {**mcp_raw_server(), "approval": "never"}}}
    async with (
        server_factory(tools=tools, auth={"tokens": TOKENS}) as running,
        httpx.AsyncClient(base_url=f"http://{running.address}") as http,
        await Client.connect(running.address, headers=_bearer("a")) as a,
        await Client.connect(running.address, headers=_bearer("b")) as b,
    ):
        await a.recv(), await b.recv()
        await a.send({"type": "chat", "content": "be huge", "agent_max_steps": 1})
        attack = asyncio.create_task(a.until("response_complete", timeout=60))
        other = asyncio.create_task(b.run("echo", timeout=60, agent_max_steps=1))
        probes = 0
        while not (attack.done() and other.done()):
            health = await http.get("/healthz", timeout=30)
            assert health.status_code == 200 and health.json()["status"] == "ok"
            probes += 1
            await asyncio.wait({attack, other}, timeout=0.05)
        frames, theirs = await attack, await other
        operator = {"Authorization": "Bearer operator-token-0123456789"}
        after = (await http.get("/healthz", headers=operator)).json()
    assert probes >= 1 and after["mcp"]["raw"] == {"state": "up", "tools": 10, "restarts": 0}
    (failed,) = [f for f in frames if kind(f) == "tool_error"]
    assert "more than this server may send" in json.dumps(failed)
    (echoed,) = [f for f in theirs if kind(f) == "tool_complete"]
    assert "echo: still here" in json.dumps(echoed)


def _bearer(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer tenant-{tenant}-token-0123456789"}
