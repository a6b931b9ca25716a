"""McpServer against server-everything: every kind of result block becomes something the model
can read; errors are ToolErrors; names and elicitation answers are mapped as documented."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from agent.errors import ToolError
from agent.tools.catalog import _missing
from agent.tools.config import McpServerConfig
from agent.tools.mcp import McpServer, _describe_failure, exposed_name
from agent.tools.mcp_content import fill_form
from agent.tools.mcp_restarts import restarts
from tests.fakes.mcp_raw import mcp_raw_server
from tests.fakes.mcp_sdk import mcp_sdk_over_http, mcp_sdk_server
from tests.fakes.mcp_servers import descendants, npm_server


@asynccontextmanager
async def running(name: str, config: McpServerConfig) -> AsyncIterator[McpServer]:
    """`config` started as MCP server `name`, its first start attempted; stopped after."""
    server = McpServer(name, config)
    server.start()
    try:
        await server.wait_started()
        yield server
    finally:
        await server.stop()


async def test_results_of_every_kind_are_described_not_dropped():
    async with running("ev", McpServerConfig(**npm_server("everything"))) as server:
        assert server.state == "up", server.error
        tools = server.tools

        async def call(name: str, arguments: dict) -> object:
            return await server.call(tools[exposed_name("ev", name)], arguments, None)

        assert await call("echo", {"message": "hi"}) == "Echo: hi"
        image = await call("get-tiny-image", {})
        assert isinstance(image, dict)
        [described] = [a for a in image["attachments"] if a["type"] == "image"]
        assert described["mime_type"] == "image/png" and described["bytes"] > 100
        resource = await call("get-resource-reference", {"resourceType": "Text", "resourceId": 1})
        assert isinstance(resource, dict)
        assert resource["attachments"][0]["type"] == "resource"
        assert resource["attachments"][0]["uri"].startswith("demo://")
        links = await call("get-resource-links", {"count": 2})
        assert isinstance(links, dict)
        assert [a["type"] for a in links["attachments"]] == ["resource_link", "resource_link"]
        structured = await call("get-structured-content", {"location": "New York"})
        assert isinstance(structured, dict) and "temperature" in str(structured["structured"])
        with pytest.raises(ToolError):
            await call("get-sum", {"a": "not a number", "b": 1})
    assert server.state == "stopped" and server.tools == {}


async def test_a_call_to_a_server_that_is_not_running_fails_at_once():
    async with running("gone", McpServerConfig(command="/nonexistent/server")) as server:
        assert server.state == "down" and "/nonexistent/server" in (server.error or "")
        with pytest.raises(ToolError, match="'gone' is not running"):
            await server.call(_missing(server, "gone__x"), {}, None)


def test_names_and_elicitation_answers():
    assert exposed_name("fs", "write_file") == "fs__write_file"
    assert exposed_name("s", "a.b c") == "s__a_b_c"
    assert len(exposed_name("s", "x" * 100)) == 64
    schema = {
        "properties": {"check": {"type": "boolean"}, "name": {"type": "string"}},
        "required": ["name"],
    }
    assert fill_form(schema, "Ada") == {"name": "Ada"}
    assert fill_form(schema, '{"name": "Ada", "check": true}') == {"name": "Ada", "check": True}
    assert fill_form({"properties": {"ok": {"type": "boolean"}}}, "yes") == {"ok": True}
    assert fill_form({}, "whatever") == {}


async def test_a_line_that_is_not_utf8_does_not_wedge_the_server():
    # A stray log line in Latin-1 on stdout ended the SDK's reader: every later call hung
    # until its timeout while the server still showed as up.
    async with running("raw", McpServerConfig(**mcp_raw_server())) as server:
        assert server.state == "up", server.error
        noisy, echo = server.tools["raw__noisy"], server.tools["raw__echo"]
        async with asyncio.timeout(10):
            assert await server.call(noisy, {"text": "one"}, None) == "noisy: one"
            assert await server.call(echo, {"text": "two"}, None) == "echo: two"
        assert server.state == "up"


async def test_names_that_collide_once_made_safe_are_numbered(caplog: pytest.LogCaptureFixture):
    async with running("raw", McpServerConfig(**mcp_raw_server())) as server:
        tools = server.tools
        assert tools["raw__a_b"].name == "a.b" and tools["raw__a_b_2"].name == "a_b"
        async with asyncio.timeout(10):
            assert await server.call(tools["raw__a_b_2"], {"text": "x"}, None) == "a_b: x"
        assert "'a_b' is offered as 'raw__a_b_2'" in caplog.text


def test_a_failure_inside_nested_task_groups_is_described_by_its_cause():
    cause = ConnectionRefusedError("connection refused")
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [cause])])
    assert _describe_failure(nested) == "ConnectionRefusedError: connection refused"


async def test_a_changed_tool_list_is_read_again_at_once():
    # notifications/tools/list_changed: the new tool is offered now, not at the next
    # periodic check (a minute away here).
    config = McpServerConfig(**mcp_raw_server(), health_interval_s=60)
    async with running("raw", config) as server:
        assert "raw__added" not in server.tools
        async with asyncio.timeout(10):
            assert await server.call(server.tools["raw__grow"], {}, None) == "grow: "
            while "raw__added" not in server.tools:  # the refresh the notice starts
                await server.next_listing()
        assert server.tools["raw__added"].name == "added" and "raw__added" in server.seen


async def _grow_and_see(server: McpServer, added: str) -> None:
    """Call `grow`; return once its new tool `added` is offered."""
    assert await server.call(server.tools["sdk__grow"], {}, None) == added
    while f"sdk__{added}" not in server.tools:
        await server.next_listing()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_changed_tool_list_is_read_again_at_once_at_2026_07_28(transport: str):
    # At MCP 2026-07-28 a server sends notifications/tools/list_changed only on the
    # subscriptions/listen stream a client opens: unsubscribed, the new tool waited for the
    # periodic check (a minute away here). The SDK's own server, at the revision it speaks.
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            config = McpServerConfig(**mcp_sdk_server(), health_interval_s=60)
        else:
            url = await stack.enter_async_context(mcp_sdk_over_http())
            config = McpServerConfig(url=url, health_interval_s=60)
        server = McpServer("sdk", config)
        server.start()
        stack.push_async_callback(server.stop)
        await server.wait_started()
        assert server.state == "up", server.error
        assert server._client is not None and server._client.protocol_version == "2026-07-28"
        assert set(server.tools) == {"sdk__grow", "sdk__huge", "sdk__echo"}
        async with asyncio.timeout(10):
            await _grow_and_see(server, "added_1")
            await _grow_and_see(server, "added_2")  # the stream is open by now, whatever the race
            added = server.tools["sdk__added_2"]
            assert await server.call(added, {"text": "hi"}, None) == "added_2: hi"
        assert server.state == "up" and server.restarts == 0


async def test_a_subscription_that_ends_is_opened_again_and_brings_changes_at_once():
    # The server ends its subscriptions/listen stream (as one going away does): the client
    # subscribes again after restart_backoff_s, and a change is then seen at once, not at the
    # periodic check (a minute away), without a restart of the connection.
    config = McpServerConfig(
        **mcp_sdk_server(end_listen=True), health_interval_s=60, restart_backoff_s=0.05
    )
    async with running("sdk", config) as server:
        assert server.state == "up", server.error

        async def listens() -> int:
            return int(await server.call(server.tools["sdk__listens"], {}, None))

        async with asyncio.timeout(10):
            while await listens() < 1:  # the first stream is acknowledged by its listing
                await server.next_listing()
            assert await server.call(server.tools["sdk__end_listens"], {}, None) == "ended"
            while await listens() < 2:  # each stream is listed again once acknowledged
                await server.next_listing()
            await _grow_and_see(server, "added_1")  # only the new stream can say so now
        assert server.state == "up" and server.restarts == 0


async def test_a_refused_subscription_is_logged_once_and_the_periodic_check_serves(
    caplog: pytest.LogCaptureFixture,
):
    # A 2026-07-28 server that declares tools.listChanged but refuses subscriptions/listen:
    # the connection stays up, and the periodic check is what lists the new tool.
    config = McpServerConfig(**mcp_sdk_server(refuse_listen=True), health_interval_s=0.3)
    async with running("sdk", config) as server:
        assert server.state == "up", server.error

        def refused() -> list[tuple[str, str]]:
            said = [(r.levelname, r.getMessage()) for r in caplog.records]
            return [(level, text) for level, text in said if "list_changed" in text]

        async with asyncio.timeout(10):
            while not refused():
                await server.next_listing()
            await server.next_listing()  # a check after the refusal: still up
            await _grow_and_see(server, "added_1")
        assert server.state == "up" and server.restarts == 0
        text = (
            "MCP server sdk: no tools/list_changed subscription (the event backend is "
            "unreachable); its tools are listed again every 0.3 s instead"
        )
        assert refused() == [("WARNING", text)]


async def test_arguments_that_do_not_fit_the_schema_never_reach_the_server():
    # The spec leaves checking to the server; one that checks nothing would run them.
    async with running("raw", McpServerConfig(**mcp_raw_server())) as server:
        strict = server.tools["raw__strict"]
        async with asyncio.timeout(10):
            assert await server.call(strict, {"mode": "fast", "n": 2}, None) == "strict: "
            for arguments, said in (
                ({}, "'mode' is a required property"),
                ({"mode": "turbo"}, "mode: 'turbo' is not one of ['fast', 'slow']"),
                ({"mode": "fast", "n": "3"}, "n: '3' is not of type 'integer'"),
                ({"mode": "fast", "extra": 1}, "Additional properties are not allowed"),
            ):
                with pytest.raises(ToolError, match="do not fit its schema") as refused:
                    await server.call(strict, arguments, None)
                assert said in str(refused.value)


async def test_an_answer_the_sdk_cannot_read_is_mended_or_fails_at_once():
    # JSON allows `\udcff`; the SDK's parser refused it and dropped the answer, so the call
    # waited for agent.tool_timeout_s (30 s) and failed without saying why.
    async with running("raw", McpServerConfig(**mcp_raw_server())) as server:
        tools = server.tools
        async with asyncio.timeout(5):
            mended = await server.call(tools["raw__surrogate"], {"text": "x"}, None)
            assert mended == "surrogate: x\ufffd"
            with pytest.raises(ToolError) as failed:  # `"result": "\udcff"`: not an object
                await server.call(tools["raw__shapeless"], {}, None)
            said = str(failed.value)
            assert said.startswith("raw__shapeless failed: its answer is not valid JSON-RPC")
            assert "surrogate" in said
            with pytest.raises(ToolError) as failed:  # valid JSON, but `"result": 5`
                await server.call(tools["raw__misshapen"], {}, None)
            said = str(failed.value)
            assert said.startswith("raw__misshapen failed: its answer is not valid JSON-RPC")
            assert said.endswith("not valid JSON-RPC: result: Input should be an object")
            assert await server.call(tools["raw__echo"], {"text": "on"}, None) == "echo: on"
        assert server.state == "up"


async def test_a_start_whose_tool_list_never_comes_fails_within_start_timeout():
    # The deadline ended the start, but the failure was reported only once the SDK had torn
    # the hung server down (a grace period for it to exit, then a kill): 5.75 s for 3 s.
    import mcp.client.stdio  # noqa: F401 - its cold import (a CPU second) is no part of the start

    config = McpServerConfig(**mcp_raw_server(hang_on="tools/list"), start_timeout_s=1.5)
    server = McpServer("raw", config)
    server.start()
    try:
        async with asyncio.timeout(10):
            await server.wait_started()
        # Reported while the SDK still tears the hung server down (a grace period of 2 s for
        # it to exit, then a kill): it is still running, and is not waited for.
        assert descendants("--hang-on")
        assert server.state == "down" and not server.tools
        assert server.error == "no answer to tools/list within start_timeout_s (1.5 s)"
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("command", "cwd", "said"),
    [
        ("no-such-mcp-server", None, "command not found: no-such-mcp-server (looked for in PATH, "),
        ("bin/no-such-server", "", "(a relative command is taken from "),
        ("no-such-mcp-server", "missing", "its cwd "),
    ],
)
async def test_a_command_that_is_not_found_says_where_it_was_looked_for(
    tmp_path, command: str, cwd: str | None, said: str
):
    folder = None if cwd is None else tmp_path / cwd
    config = McpServerConfig(command=command, cwd=folder, start_timeout_s=10)
    async with running("gone", config) as server:
        assert server.state == "down"
        assert server.error is not None and said in server.error
        if cwd == "":
            assert str(tmp_path) in server.error


async def test_restarts_back_off_doubling_and_start_over_after_a_long_run() -> None:
    """One retry policy for both loops that keep something running (the connection and the
    tools/list_changed subscription): each try here says how long it ran, on a fake clock."""
    now = [0.0]
    runs = iter([0.0] * 5 + [20.5, 0.0, 0.0])  # the sixth ran past four times its wait (5 s)
    waits: list[float] = []
    told: list[tuple[str, float]] = []

    async def pause(seconds: float) -> None:
        waits.append(seconds)

    async def once() -> str | None:
        ran = next(runs, None)
        if ran is None:
            return None  # the caller stops it
        now[0] += ran
        return f"ran {ran:g} s"

    policy = restarts(
        1.0,
        5.0,
        again=lambda why: why is not None,
        told=lambda why, wait: told.append((why, wait)),
        pause=pause,
        clock=lambda: now[0],
    )
    assert await policy(once) is None
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0, 1.0, 2.0, 4.0]
    assert told[5] == ("ran 20.5 s", 1.0)


async def test_a_try_that_raises_ends_the_restarts_with_its_error() -> None:
    async def once() -> None:
        raise asyncio.CancelledError

    policy = restarts(1.0, 5.0, again=lambda _: True, told=lambda *_: None)
    with pytest.raises(asyncio.CancelledError):
        await policy(once)
