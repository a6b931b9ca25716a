"""A huge MCP answer fails its own call, not the server (issue 42, MEDIUM).

An MCP tool answering 20 MB cost 12.7 s of CPU in the SDK's stdio reader (the square of the
size), on the event loop: every tenant waited, the health check timed out and the server was
restarted, its tools gone for everyone. Over streamable HTTP the SDK read a JSON answer of any
size whole, and failed an event-stream answer over 1 MiB as a broken connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import pytest

from agent.errors import ToolError
from agent.tools.config import McpServerConfig
from agent.tools.mcp import McpServer
from agent.tools.mcp_http import _events
from agent.tools.mcp_stdio import TooLong, read_lines
from tests.agent.tools.test_mcp import running
from tests.conftest import ServerFactory
from tests.fakes.client import kind
from tests.fakes.mcp_raw import mcp_raw_server
from tests.fakes.mcp_sdk import mcp_sdk_over_http
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe
from tests.security.harness import (
    TENANT_TOKENS,
    attack_while_another_runs,
    bearer,
    by_content,
)


def raw_server(**extra: Any) -> AbstractAsyncContextManager[McpServer]:
    return running("raw", McpServerConfig(**mcp_raw_server(), **extra))


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
    meanwhile, /healthz says `ok` throughout, and the server is never restarted."""
    calls = by_content(
        "be huge",
        act(FakeToolCall("raw__huge", {"text": "20"})),
        act(FakeToolCall("raw__echo", {"text": "still here"})),
    )
    fake_llm.script("act", calls, calls)
    fake_llm.script("observe", *[observe("Done.", final="Done.")] * 2)
    tools = {"enabled": [], "mcp": {"raw": {**mcp_raw_server(), "approval": "never"}}}
    async with (
        server_factory(tools=tools, auth={"tokens": TENANT_TOKENS}) as running,
        httpx.AsyncClient(base_url=f"http://{running.address}") as http,
    ):
        seen = await attack_while_another_runs(running.address, "be huge", "echo", 60)
        after = (await http.get("/healthz", headers=bearer("operator"))).json()
    assert seen.probes >= 1 and after["mcp"]["raw"] == {"state": "up", "tools": 10, "restarts": 0}
    (failed,) = [f for f in seen.attack if kind(f) == "tool_error"]
    assert "more than this server may send" in json.dumps(failed)
    (echoed,) = [f for f in seen.other if kind(f) == "tool_complete"]
    assert "echo: still here" in json.dumps(echoed)


@asynccontextmanager
async def sdk_over_http(answers: str, **extra: Any) -> AsyncIterator[McpServer]:
    """The SDK's own server over streamable HTTP, answering as `answers` says ("sse": an event
    stream per POST, "json": one JSON body), started as MCP server `sdk`."""
    async with mcp_sdk_over_http(json_response=answers == "json") as url:
        async with running("sdk", McpServerConfig(url=url, **extra)) as server:
            assert server.state == "up", server.error
            yield server


@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_over_http_an_answer_over_the_cap_fails_its_call_and_the_server_stays_up(
    answers: str,
) -> None:
    async with sdk_over_http(answers) as server:
        with pytest.raises(ToolError) as failed:
            async with asyncio.timeout(30):
                await server.call(server.tools["sdk__huge"], {"megabytes": 20}, None)
        assert "more than this server may send (max_message_bytes, 8,388,608)" in str(failed.value)
        assert await server.call(server.tools["sdk__echo"], {"text": "on"}, None) == "echo: on"
        assert server.state == "up" and server.restarts == 0


@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_over_http_an_answer_under_the_cap_arrives_whole(answers: str) -> None:
    """The cap is the stdio one: 5 MB under 6 MB arrives (the SDK's own default for an event
    stream, 1 MiB, would have failed it)."""
    async with sdk_over_http(answers, max_message_bytes=6_000_000) as server:
        text = await server.call(server.tools["sdk__huge"], {"megabytes": 5}, None)
        assert text == "x" * 5_000_000


async def test_events_are_split_however_the_reads_cut_them() -> None:
    big = b"data: " + b"y" * 5000 + b"\r\n\r\n"
    stream = Chunks(
        b"data: a\n", b"\ndata: b\r", b"\n\r\n", big[:3000], big[3000:] + b"data: c\n\n"
    )
    events = [event async for event in _events(stream, 4096)]  # type: ignore[arg-type]
    assert events == [b"data: a\n\n", b"data: b\r\n\r\n", None, b"data: c\n\n"]


@pytest.mark.parametrize("answers", ["sse", "json"])
async def test_a_huge_http_answer_in_a_run_leaves_the_server_to_the_other_tenant(
    server_factory: ServerFactory, fake_llm: FakeLLM, answers: str
) -> None:
    """The same over streamable HTTP: tenant a's 20 MB call fails alone, tenant b's call of
    the same server completes meanwhile, /healthz says `ok` throughout, no restart."""
    calls = by_content(
        "be huge",
        act(FakeToolCall("sdk__huge", {"megabytes": 20})),
        act(FakeToolCall("sdk__echo", {"text": "still here"})),
    )
    fake_llm.script("act", calls, calls)
    fake_llm.script("observe", *[observe("Done.", final="Done.")] * 2)
    async with mcp_sdk_over_http(json_response=answers == "json") as url:
        tools = {"enabled": [], "mcp": {"sdk": {"url": url, "approval": "never"}}}
        async with (
            server_factory(tools=tools, auth={"tokens": TENANT_TOKENS}) as running,
            httpx.AsyncClient(base_url=f"http://{running.address}") as http,
        ):
            seen = await attack_while_another_runs(running.address, "be huge", "echo", 60)
            after = (await http.get("/healthz", headers=bearer("operator"))).json()
    assert seen.probes >= 1 and after["mcp"]["sdk"] == {"state": "up", "tools": 3, "restarts": 0}
    (failed,) = [f for f in seen.attack if kind(f) == "tool_error"]
    assert "more than this server may send" in json.dumps(failed)
    (echoed,) = [f for f in seen.other if kind(f) == "tool_complete"]
    assert "echo: still here" in json.dumps(echoed)
