"""The LOW findings of the second review (issue 42), one test or more each."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.tools import ExtractorPool, create_http_client
from agent.tools.config import WebFetchConfig
from agent.tools.web_fetch import build_web_fetch
from server.settings import ConfigError, load_settings
from tests.agent.tools.conftest import call
from tests.conftest import ServerFactory
from tests.fakes.client import Client, kind
from tests.fakes.mcp_raw import mcp_raw_server
from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe
from tests.fakes.processes import free_port, start_server_process
from tests.security.harness import TENANT_TOKENS, bearer
from tests.security.test_hostile_pages import worker_pids

# -- 1: permission is checked before approval is asked --------------------------------------


async def test_another_tenants_mcp_tool_is_refused_without_asking_approval(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    """Tenant b's model calling tenant a's MCP tool paused b's run at `awaiting_approval`,
    showing the call; now it is a `tool_error` and nothing is asked."""
    fake_llm.script("act", act(FakeToolCall("raw__echo", {"text": "a's data"})))
    fake_llm.script("observe", observe("It is not mine.", final="Sorry."))
    raw = {**mcp_raw_server(), "tenants": ["a"], "approval": "always"}
    tools = {"enabled": [], "mcp": {"raw": raw}}
    async with (
        server_factory(tools=tools, auth={"tokens": TENANT_TOKENS}) as running,
        await Client.connect(running.address, headers=bearer("b")) as b,
    ):
        await b.recv()
        frames = await b.run("use raw__echo", timeout=20, agent_max_steps=1)
    assert "agent_tool_approval" not in [kind(f) for f in frames]
    (failed,) = [f for f in frames if kind(f) == "tool_error"]
    assert "raw__echo is not available now" in json.dumps(failed)
    assert kind(frames[-1]) == "response_complete"
    assert not [f for f in frames if kind(f) == "error"]


# -- 2: deeply nested arguments are the call's error, not the run's -------------------------


@pytest.mark.parametrize("levels", [3000, 100])
async def test_deeply_nested_arguments_are_a_tool_error_and_the_run_goes_on(
    server: Any, fake_llm: FakeLLM, levels: int
) -> None:
    """3000 levels raised RecursionError in the argument parser (`internal_error`, the run
    ended); 100 parse, but orjson, which stores them, stops at 255 and so do other readers."""
    nested = '{"timezone": ' * levels + '"UTC"' + "}" * levels
    fake_llm.script("act", act(FakeToolCall("get_current_time", nested)))
    fake_llm.script("observe", observe("Broken arguments.", final="Done."))
    async with await server.client() as client:
        await client.recv()
        frames = await client.run("time?", timeout=20, agent_max_steps=1)
    (failed,) = [f for f in frames if kind(f) == "tool_error"]
    assert "nested more than 64 levels deep" in json.dumps(failed)
    assert not [f for f in frames if kind(f) == "error"]
    assert kind(frames[-1]) == "response_complete"


# -- 3: page-parsing workers get no credential -----------------------------------------------


async def test_extraction_workers_inherit_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-workers")
    monkeypatch.setenv("AGENT__AUTH__TOKENS", '{"tok-not-for-workers": {"tenant": "a"}}')
    pool = ExtractorPool(workers=1, memory_mb=768)
    try:
        title, _ = await pool.extract(b"<title>t</title>", "text/html", None, "http://x/")
        assert title == "t"
        (pid,) = worker_pids()
        environ = (await asyncio.to_thread(Path(f"/proc/{pid}/environ").read_bytes)).split(b"\0")
    finally:
        await pool.aclose()
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert "OPENAI_API_KEY" not in names and "AGENT__AUTH__TOKENS" not in names
    assert not [n for n in names if n.startswith("AGENT__")]
    assert "PATH" in names and names <= {*os.environ}  # only what MCP servers get, at most


# -- 4: no URL setting echoes its userinfo ----------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AGENT__TELEMETRY__OTLP_ENDPOINT", "ftp://tracer:s3cret-pw@collector:4318/v1/traces"),
        ("AGENT__TELEMETRY__OTLP_ENDPOINT", "http://tracer:s3cret-pw@collector:port/v1"),
        ("AGENT__LLM__BASE_URL", "http://user:s3cret-pw@:8080/v1"),
        ("AGENT__TOOLS__MCP", '{"x": {"url": "ftp://user:s3cret-pw@host/mcp"}}'),
    ],
)
def test_a_refused_url_setting_is_shown_without_its_userinfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("AGENT__STORAGE__SQLITE_PATH", str(tmp_path / "a.db"))
    with pytest.raises(ConfigError) as refused:
        load_settings()
    message = str(refused.value)
    assert variable in message or "tools.mcp" in message  # it still says where
    assert "s3cret-pw" not in message and "tracer:" not in message and "user:" not in message


# -- 5: web_fetch errors are no DNS oracle ----------------------------------------------------


async def test_a_refusal_says_only_that_the_address_is_not_allowed() -> None:
    """Messages such as "runsc (127.0.0.1) is a loopback address" and "could not be resolved"
    told a tenant which internal names exist and where they point."""
    extractor = ExtractorPool(workers=1, memory_mb=768)
    try:
        async with create_http_client(timeout_s=5) as http:
            tool = build_web_fetch(WebFetchConfig(), http=http, extractor=extractor)
            urls = ["http://localhost:1/", "http://no-such-host.invalid/", "http://10.1.2.3/"]
            result = await _fetch_all(tool, urls)
    finally:
        await extractor.aclose()
    errors = [r["error"] for r in result]
    assert errors == [
        f"refused: {host} is not an address web_fetch may reach (only public internet "
        "addresses are; an operator can allow others in tools.web_fetch.allow_hosts)"
        for host in ("localhost", "no-such-host.invalid", "10.1.2.3")
    ]


async def _fetch_all(tool: Any, urls: list[str]) -> list[dict[str, Any]]:
    try:
        result = await call(tool, {"urls": urls})
    except Exception as exc:  # every URL failed: the ToolError lists each
        text = str(exc).removeprefix("No page could be fetched. ")
        return [{"error": part.split(": ", 1)[1]} for part in text.split("; http")]
    return list(result["results"])


# -- 8: AG-UI refusals readable by allowed origins only; oversized fragmented messages get 1009


async def test_a_refusal_of_a_foreign_origin_is_not_readable_by_it(
    server_factory: ServerFactory,
) -> None:
    async with (
        server_factory(auth={"tokens": TENANT_TOKENS}) as running,
        httpx.AsyncClient(base_url=f"http://{running.address}") as http,
    ):
        body = {"threadId": "t1", "runId": "r1", "messages": [], "tools": [], "context": []}
        foreign = {"Origin": "https://evil.example", **bearer("a")}
        refused = await http.post("/agui", json=body, headers=foreign)
        preflight = await http.options("/agui", headers={"Origin": "https://evil.example"})
        allowed = await http.options("/agui", headers={"Origin": f"http://{running.address}"})
    assert refused.status_code == 403 and preflight.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    assert "access-control-allow-origin" not in preflight.headers
    assert allowed.headers["access-control-allow-origin"] == f"http://{running.address}"


async def test_an_oversized_message_in_many_fragments_is_closed_with_1009(
    tmp_path: Path,
) -> None:
    """The server closed the socket with the rest of the message unread: a reset, and the
    client never read the 1009 (a real server process; the fragments keep coming)."""
    port = free_port()
    env = {"AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "a.db")}
    server = await start_server_process(tmp_path, port, env)
    try:
        codes = []
        for _ in range(3):
            async with connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
                await ws.recv()
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.send(iter(["x" * 64] * 20_000))  # 1.28 MB in 64-byte fragments
                    await asyncio.wait_for(ws.recv(), 10)
                codes.append(closed.value.rcvd.code if closed.value.rcvd else None)
    finally:
        server.terminate()
        await server.wait()
    assert codes == [1009] * 3
