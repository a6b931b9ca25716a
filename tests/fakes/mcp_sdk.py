"""An MCP server built on the official SDK (`MCPServer`), which speaks MCP 2026-07-28 with the
SDK in .venv: there a change notice goes only to the `subscriptions/listen` streams a client
opened, as the SDK's servers send it (`ctx.notify_tools_changed()`), never unasked.

`grow` adds a tool (`added_1`, then `added_2`, ...) and says so; `huge` answers with that many
megabytes of text, `echo` with its text. With `--refuse-listen` every
`subscriptions/listen` is refused (its event backend is down), although the server declares
`tools.listChanged`; with `--end-listen`, two more tools: `listens` says how many
`subscriptions/listen` streams were opened, and `end_listens` ends those open (gracefully, as
a server going away does). Run as `python -m tests.fakes.mcp_sdk`: over stdio (`mcp_sdk_server()` is
its config), or with `--http` over streamable HTTP on a free loopback port, which it prints
first (`mcp_sdk_over_http()` runs it and yields its URL); with `--json` too, it answers each
POST with one JSON body instead of an event stream.
"""

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


def mcp_sdk_server(*, refuse_listen: bool = False, end_listen: bool = False) -> dict[str, Any]:
    """`[tools.mcp.<name>]` for this server over stdio."""
    flags = ["--end-listen"] if end_listen else []
    return {"command": sys.executable, "args": [*_args(refuse_listen), *flags]}


@asynccontextmanager
async def mcp_sdk_over_http(
    *, refuse_listen: bool = False, json_response: bool = False
) -> AsyncIterator[str]:
    """This server over streamable HTTP, in a subprocess; yield its URL. `json_response`:
    each answer is a JSON body, not an event stream."""
    http = ["--http", *(["--json"] if json_response else [])]
    process = await asyncio.create_subprocess_exec(
        sys.executable, *_args(refuse_listen), *http, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(15):
            port = int(await process.stdout.readline())
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


def _args(refuse_listen: bool) -> list[str]:
    return ["-m", "tests.fakes.mcp_sdk", *(["--refuse-listen"] if refuse_listen else [])]


def main() -> None:
    import anyio
    from mcp import MCPError
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver import server as mcpserver_module
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
    from mcp_types import INTERNAL_ERROR

    class DownBus(InMemorySubscriptionBus):
        def subscribe(self, listener: Any) -> Any:
            raise MCPError(INTERNAL_ERROR, "the event backend is unreachable")

    class CountingBus(InMemorySubscriptionBus):
        opened = 0

        def subscribe(self, listener: Any) -> Any:
            CountingBus.opened += 1  # once per listen stream
            return super().subscribe(listener)

    handlers: list[ListenHandler] = []

    class KeptListenHandler(ListenHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            handlers.append(self)

    mcpserver_module.ListenHandler = KeptListenHandler  # type: ignore[misc]
    bus = DownBus() if "--refuse-listen" in sys.argv else CountingBus()
    app: MCPServer = MCPServer("grower", subscriptions=bus)
    grown = 0

    @app.tool(structured_output=False)
    async def grow(ctx: Context) -> str:
        """Add a tool (`added_1`, `added_2`, ...), and say so."""
        nonlocal grown
        grown += 1
        name = f"added_{grown}"

        def added(text: str = "") -> str:
            return f"{name}: {text}"

        app.add_tool(added, name=name, description="Added by grow.", structured_output=False)
        await ctx.notify_tools_changed()  # to the listen streams: 2026-07-28's only way
        return name

    @app.tool(structured_output=False)
    async def huge(megabytes: float, ctx: Context) -> str:
        """Answer with `megabytes` megabytes of text. Over HTTP a notification first, on the
        request's own stream: the answer is then an event on an event stream, not a JSON body
        (the SDK's servers have no public call that does it unasked at 2026-07-28)."""
        from mcp_types import ToolListChangedNotification

        await ctx.session._notify(ToolListChangedNotification(), request_scoped=True)
        return "x" * int(megabytes * 1e6)

    @app.tool(structured_output=False)
    def echo(text: str) -> str:
        """Echo a text."""
        return f"echo: {text}"

    if "--end-listen" in sys.argv:

        @app.tool(structured_output=False)
        def listens() -> str:
            """How many subscriptions/listen streams were opened."""
            return str(CountingBus.opened)

        @app.tool(structured_output=False)
        def end_listens() -> str:
            """End every open subscriptions/listen stream."""
            for handler in handlers:
                handler.close()
            return "ended"

    if "--http" not in sys.argv:
        app.run("stdio")
        return
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # a client that connects before uvicorn serves waits in the backlog
    print(sock.getsockname()[1], flush=True)
    config = uvicorn.Config(
        app.streamable_http_app(json_response="--json" in sys.argv), log_level="warning"
    )
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
