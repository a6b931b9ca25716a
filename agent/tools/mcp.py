"""MCP servers as a source of tools, through the official `mcp` SDK.

Each configured server lives in its own long-lived task (the SDK's context managers must be
entered and left in one task): it connects (stdio or streamable HTTP) within
`start_timeout_s`, lists the server's tools, then watches the connection (a call that finds it
closed, or a failing periodic `tools/list`) and reconnects under its retry policy
(agent/tools/mcp_restarts.py: exponential backoff, with tenacity). While a
server is down its tools are gone from new runs and a call to it is a ToolError at once.
`notifications/tools/list_changed` lists the tools again at once: servers send it unasked
before MCP 2026-07-28, and from then on only on a `subscriptions/listen` stream, which
`_listen` keeps open.

Tools are offered to the model as `<server>__<tool>`: server names may not contain `__`, so
the split is unambiguous; characters a model API refuses in a name become `_`, and a name
that is then another tool's gets a number (`_2`, logged).

Results: text blocks and `structuredContent` become the result; images, audio and resources
are described (type, size, URI) instead of dropped; `isError` results raise ToolError.
Cancelling a call (a stop) abandons the request, and the SDK sends MCP's
`notifications/cancelled` for it. A stdio answer the SDK's parser refuses is mended or fails
its call at once (`_MendingReader`), instead of being dropped while the call waits. An answer
longer than `max_message_bytes` fails its call unparsed, over stdio
(agent/tools/mcp_stdio.py) and streamable HTTP (agent/tools/mcp_http.py) alike.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent.errors import ToolError
from agent.ports import ToolSpec
from agent.tools.config import McpServerConfig
from agent.tools.mcp_content import Ask, describe_result, elicit
from agent.tools.mcp_restarts import restarts
from agent.tools.mcp_stdio import bounded_stdio_client

if TYPE_CHECKING:
    import mcp_types as types
    from mcp import Client
    from mcp.client import Transport
    from mcp.client._transport import ReadStream, TransportStreams
    from mcp.client.session import ClientRequestContext
    from mcp.client.subscriptions import Subscription
    from mcp.shared.message import SessionMessage

__all__ = ["McpServer", "McpTool", "exposed_name", "mcp_ask"]

log = logging.getLogger(__name__)
SEPARATOR = "__"
_BAD_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # lone, once `json.loads` has joined the pairs

mcp_ask: ContextVar[Ask | None] = ContextVar("mcp_ask", default=None)
"""Set by the caller for the duration of a call: how an elicitation reaches the person."""

State = Literal["starting", "up", "down", "stopped"]


def exposed_name(server: str, tool: str) -> str:
    """The name the model sees: `<server>__<tool>`, limited to what model APIs accept."""
    return (server + SEPARATOR + _BAD_NAME_CHARS.sub("_", tool))[:64]


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool of a running server."""

    server: str
    name: str  # the server's own name for it
    spec: ToolSpec  # as offered to the model
    destructive: bool  # the server's annotations say destructiveHint: true


class McpServer:
    """One configured MCP server: its connection task, its tools and its health."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.state: State = "starting"
        self.error: str | None = None
        self.restarts = 0
        self.tools: dict[str, McpTool] = {}  # by exposed name; empty unless up
        self.seen: set[str] = set()  # every exposed name it ever listed (valid in chat.tools)
        self._client: Client | None = None
        self._attempted = asyncio.Event()  # the first connection attempt has ended
        self._up = asyncio.Event()
        self._dead = asyncio.Event()
        self._stopping = asyncio.Event()
        self._changed = asyncio.Event()  # the server said its tools changed
        self._listing = asyncio.Event()  # set (and replaced) each time the tools are listed
        self._task: asyncio.Task[None] | None = None
        self._asks: dict[int, Ask] = {}  # in-flight calls that can ask the person
        self._validators: dict[str, Any] = {}  # of the tools' argument schemas, by name
        self._next_call = 0
        self._listen_refused = False  # logged once: later refusals go to the debug log

    def visible_to(self, tenant_id: str) -> bool:
        return not self.config.tenants or tenant_id in self.config.tenants

    def needs_approval(self, tool: McpTool) -> bool:
        mode = self.config.approval
        return mode == "always" or (mode == "destructive" and tool.destructive)

    def health(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "tools": len(self.tools),
            "restarts": self.restarts,
            **({"error": self.error} if self.error else {}),
        }

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run_forever(), name=f"mcp-{self.name}")

    async def wait_up(self) -> None:
        """Return once the server is up (at once if it is)."""
        await self._up.wait()

    async def wait_started(self) -> None:
        """Return once the first connection attempt succeeded or failed."""
        await self._attempted.wait()

    async def next_listing(self) -> None:
        """Return once the tools were listed again (a health check, a change notice)."""
        await self._listing.wait()

    async def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.state = "stopped"

    async def _run_forever(self) -> None:
        """Serve the connection, and start it again (agent/tools/mcp_restarts.py) each time
        it ends, until the server is stopped."""
        policy = restarts(
            self.config.restart_backoff_s,
            self.config.restart_backoff_max_s,
            again=lambda _: not self._stopping.is_set(),
            told=self._restarting,
            pause=self._pause,
        )
        await policy(self._try_serving)

    async def _try_serving(self) -> None:
        if self._stopping.is_set():
            return  # stopped during the wait before it
        try:
            await self._serve_once()
        except Exception as exc:  # noqa: BLE001 - a broken server must never end the app
            self._down(self._where(_describe_failure(exc), exc))
        finally:
            self._attempted.set()

    def _restarting(self, _: object, delay: float) -> None:
        log.warning(
            "MCP server %s is down (%s); restarting in %.1f s", self.name, self.error, delay
        )
        self.restarts += 1

    async def _pause(self, delay: float) -> None:
        """The wait before a restart, ended early by a stop."""
        try:
            async with asyncio.timeout(delay):
                await self._stopping.wait()
        except TimeoutError:
            pass

    async def _serve_once(self) -> None:
        self._dead.clear()
        self.state = "starting"
        async with AsyncExitStack() as stack:
            client, tools = await self._start(stack)
            self._client, self.tools = client, tools
            self.seen.update(tools)
            self.state, self.error = "up", None
            self._up.set()
            self._attempted.set()
            log.info("MCP server %s is up with %d tool(s)", self.name, len(tools))
            listener = asyncio.create_task(self._listen(client), name=f"mcp-{self.name}-listen")
            try:
                await self._watch(client)
            finally:
                listener.cancel()  # before the client closes: it ends its stream first
                await asyncio.gather(listener, return_exceptions=True)
                self._client, self.tools = None, {}
        if not self._stopping.is_set():
            self._down(self.error or "the connection closed")

    async def _start(self, stack: AsyncExitStack) -> tuple[Client, dict[str, McpTool]]:
        """Connect, initialize and list the tools within `start_timeout_s`.

        A failure is reported at that deadline: when the server hangs, the SDK's teardown
        (it waits for the process to exit, then kills it) takes seconds more, and the app's
        startup waits for this first attempt (`wait_started`).
        """
        timeout = self.config.start_timeout_s
        step = "initialize"

        def overran() -> None:
            if self.state == "starting":
                self._down(f"no answer to {step} within start_timeout_s ({timeout:g} s)")
                self._attempted.set()

        late = asyncio.get_running_loop().call_later(timeout, overran)
        try:
            async with asyncio.timeout(timeout):
                client = await stack.enter_async_context(self._new_client(stack))
                step = "tools/list"
                return client, await self._list_tools(client)
        except TimeoutError:
            overran()  # the timer may not have run yet
            raise TimeoutError(self.error) from None
        finally:
            late.cancel()

    def _where(self, why: str, exc: BaseException) -> str:
        """`why`, with where a command that was not found was looked for: a relative command
        or `cwd` is taken from the working directory, which the operator may not expect."""
        while isinstance(exc, BaseExceptionGroup):
            exc = exc.exceptions[0]
        config = self.config
        if not isinstance(exc, FileNotFoundError) or not config.command:
            return why
        if config.cwd is not None and not Path(config.cwd).is_dir():
            return f"its cwd {config.cwd} is not a directory"
        folder = config.cwd or Path.cwd()
        if os.sep in config.command:
            return f"{why} (a relative command is taken from {folder})"
        return f"{why} (looked for in PATH, run from {folder})"

    def _new_client(self, stack: AsyncExitStack) -> Client:
        # The SDK costs over half a second of CPU to import: load it once a server is configured.
        import httpx2
        from mcp import Client, StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client

        from agent.tools.mcp_http import IDENTITY, bound_messages

        config = self.config
        if config.url:
            headers = IDENTITY | {k: v.get_secret_value() for k, v in config.headers.items()}
            cap = config.max_message_bytes
            http = httpx2.AsyncClient(
                headers=headers,
                # The SDK's recommended timeouts: a response stream may stay open for minutes.
                timeout=httpx2.Timeout(30, read=300),
                event_hooks={"response": [bound_messages(cap, self.name)]},
            )
            stack.push_async_callback(http.aclose)
            server: Any = streamable_http_client(
                config.url, http_client=http, max_sse_event_size=cap
            )
        else:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
                # A line that is not UTF-8 (a stray log line) is read with U+FFFD, not left
                # to end the reader and wedge every later call.
                encoding_error_handler="replace",
            )
            stdio = bounded_stdio_client(
                params, max_message_bytes=config.max_message_bytes, server=self.name
            )
            server = _mending(stdio, self.name)
        return Client(
            server,
            elicitation_callback=self._elicit,
            message_handler=self._on_message,
            cache=None,
        )

    async def _on_message(self, message: object) -> None:
        """`notifications/tools/list_changed`: list the tools again now, not at the next
        health check (`_watch`). From MCP 2026-07-28 it comes on the stream `_listen` opens
        (the SDK passes it here as well)."""
        import mcp_types as types

        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()

    async def _listen(self, client: Client) -> None:
        """From MCP 2026-07-28 (SEP-2575) a server says its tools changed only on a
        `subscriptions/listen` stream the client opens: keep one open for as long as the
        connection, and have the tools listed again for each change it reports.

        Events are not replayed, so the tools are also listed again when a stream opens (a
        change since the start's listing) and when one ends; a stream that ends is opened
        again after `restart_backoff_s` (doubled while they keep ending soon). One that cannot
        be opened (refused, not acknowledged within `start_timeout_s`, not honoured) leaves
        the periodic check of `_watch`, logged once; the connection is not affected.
        """
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return  # older: the server sends list_changed unasked (`_on_message`)
        tools = client.server_capabilities.tools
        if tools is None or not tools.list_changed:
            return  # it never says its tools changed: the periodic check is all there is
        policy = restarts(  # its waits are cancelled with the connection (`_serve_once`)
            self.config.restart_backoff_s,
            self.config.restart_backoff_max_s,
            again=lambda why: why is not None,
            told=self._resubscribing,
        )
        await policy(self._listen_once, client)

    async def _listen_once(self, client: Client) -> str | None:
        """Keep one subscription open until it ends: why it ended, or None when it could not
        be opened (nothing to try again)."""
        async with AsyncExitStack() as stack:
            try:
                subscription = await self._subscribe(client, stack)
            except Exception as exc:  # noqa: BLE001 - the connection must outlive it
                self._refused(_describe_failure(exc))
                return None
            if not subscription.honored.tools_list_changed:
                self._refused("the server did not honour it")
                return None
            self._changed.set()  # a change before the acknowledgment is not replayed
            try:
                async for _event in subscription:  # only ToolsListChanged was asked for
                    self._changed.set()
                why = "the server closed it"
            except Exception as exc:  # noqa: BLE001 - SubscriptionLost: the cause says why
                why = _describe_failure(exc.__cause__ or exc)
        self._changed.set()  # also finds out at once whether the connection is gone
        return why

    def _resubscribing(self, why: str, delay: float) -> None:
        log.info(
            "MCP server %s: the tools/list_changed subscription ended (%s); "
            "subscribing again in %.1f s",
            self.name,
            why,
            delay,
        )

    async def _subscribe(self, client: Client, stack: AsyncExitStack) -> Subscription:
        """Open a `subscriptions/listen` stream for tools/list_changed on `stack`, within
        `start_timeout_s` (the SDK waits for the acknowledgment without a limit)."""
        timeout = self.config.start_timeout_s
        try:
            async with asyncio.timeout(timeout):
                return await stack.enter_async_context(client.listen(tools_list_changed=True))
        except TimeoutError:
            raise TimeoutError(
                f"no acknowledgment within start_timeout_s ({timeout:g} s)"
            ) from None

    def _refused(self, why: str) -> None:
        say = log.debug if self._listen_refused else log.warning
        self._listen_refused = True
        say(
            "MCP server %s: no tools/list_changed subscription (%s); its tools are listed "
            "again every %g s instead",
            self.name,
            why,
            self.config.health_interval_s,
        )

    async def _watch(self, client: Client) -> None:
        """Return when the connection dies or the server is stopped. List the tools again
        every `health_interval_s`, and at once when the server says they changed."""
        interval = self.config.health_interval_s
        events = (self._stopping, self._dead, self._changed)
        while not self._stopping.is_set() and not self._dead.is_set():
            waits = [asyncio.ensure_future(e.wait()) for e in events]
            try:
                await asyncio.wait(waits, timeout=interval, return_when="FIRST_COMPLETED")
            finally:
                for waiter in waits:
                    waiter.cancel()
            if self._stopping.is_set() or self._dead.is_set():
                return
            self._changed.clear()
            try:
                async with asyncio.timeout(min(interval, self.config.start_timeout_s)):
                    self.tools = await self._list_tools(client)
                self.seen.update(self.tools)
                listed, self._listing = self._listing, asyncio.Event()
                listed.set()
            except Exception as exc:  # noqa: BLE001 - any failure means the server is gone
                self._mark_dead(f"health check failed: {_describe_failure(exc)}")

    async def _list_tools(self, client: Client) -> dict[str, McpTool]:
        tools: dict[str, McpTool] = {}
        cursor: str | None = None
        for _ in range(100):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            for tool in page.tools:
                exposed = self._unique_name(tool.name, tools)
                spec = ToolSpec(
                    exposed, tool.description or tool.title or tool.name, dict(tool.input_schema)
                )
                hint = tool.annotations.destructive_hint if tool.annotations else None
                tools[exposed] = McpTool(self.name, tool.name, spec, hint is True)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _unique_name(self, tool: str, taken: dict[str, McpTool]) -> str:
        """`exposed_name`, numbered when it is taken already (`a.b` and `a_b` both give
        `a_b`; two long names can share their first 64 characters)."""
        exposed = base = exposed_name(self.name, tool)
        number = 1
        while exposed in taken:
            number += 1
            suffix = f"_{number}"
            exposed = base[: 64 - len(suffix)] + suffix
        if exposed != base and exposed not in self.seen:
            log.warning(
                "MCP server %s: tool %r is offered as %r (%r is another of its tools)",
                self.name,
                tool,
                exposed,
                base,
            )
        return exposed

    def _down(self, error: str) -> None:
        self.state, self.error, self.tools, self._client = "down", error, {}, None
        self._up.clear()

    def _mark_dead(self, error: str) -> None:
        if self.state == "up":
            self.error = error
            self.state = "down"
            self.tools = {}
            self._up.clear()
        self._dead.set()

    # -- calls -----------------------------------------------------------------------------------

    async def call(self, tool: McpTool, arguments: dict[str, Any], ask: Ask | None) -> Any:
        """Call `tool`; return its result as a JSON value. Raise ToolError when it fails."""
        client = self._client
        if client is None or self.state != "up":
            raise ToolError(
                f"The MCP server {self.name!r} is not running ({self.error or 'starting'}); "
                "its tools are unavailable for now."
            )
        import httpx2  # loaded with the SDK by _new_client, as are the two below
        import mcp_types as types
        from mcp import MCPError

        problem = self._argument_problem(tool, arguments)
        if problem is not None:  # said precisely now, not left to a server that may not check
            raise ToolError(f"{tool.spec.name}: the arguments do not fit its schema: {problem}")
        token = mcp_ask.set(ask)
        call_id = self._next_call = self._next_call + 1
        if ask is not None:
            self._asks[call_id] = ask
        try:
            result = await client.call_tool(tool.name, arguments)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self._mark_dead("the connection closed during a call")
                raise ToolError(f"The MCP server {self.name!r} stopped during the call.") from None
            raise ToolError(f"{tool.spec.name} failed: {exc.error.message}") from None
        except (OSError, EOFError, httpx2.HTTPError) as exc:
            self._mark_dead(_describe_failure(exc))
            raise ToolError(f"The MCP server {self.name!r} failed during the call.") from None
        except Exception as exc:
            if _closed_stream(exc):
                self._mark_dead("the connection closed during a call")
                raise ToolError(f"The MCP server {self.name!r} stopped during the call.") from None
            raise
        finally:
            mcp_ask.reset(token)
            self._asks.pop(call_id, None)
        value = describe_result(result)
        if result.is_error:
            text = value if isinstance(value, str) else str(value)
            raise ToolError(text or f"{tool.spec.name} reported an error.")
        return value

    def _argument_problem(self, tool: McpTool, arguments: dict[str, Any]) -> str | None:
        """What is wrong with `arguments` for the tool's JSON Schema (2020-12, MCP's
        default), or None; a schema that is itself invalid checks nothing."""
        from jsonschema import Draft202012Validator, SchemaError
        from jsonschema.exceptions import best_match

        schema = tool.spec.parameters
        validator = self._validators.get(tool.spec.name)
        if validator is None or validator.schema is not schema:  # new, or listed again
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError:
                return None
            validator = self._validators[tool.spec.name] = Draft202012Validator(schema)
        error = best_match(validator.iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return f"{where}: {error.message}" if where else error.message

    async def _elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """A server asks the person something mid-call: the run's request_input pause answers.

        On 2026 connections the request comes within the call (the context variable knows
        the run); on older ones it arrives on the connection's own task, so it goes to the
        server's one in-flight call that can ask, and is declined when there are several.
        """
        ask = mcp_ask.get()
        if ask is None and len(set(self._asks.values())) == 1:
            ask = next(iter(self._asks.values()))
        return await elicit(ask, params)


def _closed_stream(exc: BaseException) -> bool:
    name = type(exc).__name__
    return name in ("ClosedResourceError", "BrokenResourceError", "EndOfStream")


def _describe_failure(exc: BaseException) -> str:
    from mcp import MCPError  # not at the top: the SDK loads only with a server (_new_client)

    while isinstance(exc, BaseExceptionGroup):  # task groups nest: the first cause inside
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return str(exc) or "no answer in time"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, MCPError):
        return exc.error.message
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@asynccontextmanager
async def _mending(transport: Transport, server: str) -> AsyncIterator[TransportStreams]:
    """`transport`, its read stream mended by `_MendingReader`."""
    async with transport as (read_stream, write_stream):
        yield _MendingReader(read_stream, server), write_stream


class _MendingReader:
    """A stdio transport's read stream, with what the SDK's parser refuses mended.

    The SDK passes a line it cannot parse on as an exception, and its dispatcher drops it: an
    answer lost so leaves its call waiting for `agent.tool_timeout_s`. A lone surrogate escape
    (`\\udcff`: JSON text allows it, pydantic's parser does not) is read as U+FFFD instead;
    an answer still unreadable becomes a parse error for its request, which fails at once.
    """

    def __init__(self, inner: ReadStream[SessionMessage | Exception], server: str) -> None:
        self._inner = inner
        self._server = server

    async def receive(self) -> SessionMessage | Exception:
        return self._mend(await self._inner.receive())

    def __aiter__(self) -> _MendingReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._mend(await self._inner.__anext__())

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _MendingReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._inner.aclose()

    def _mend(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        import mcp_types as types
        from mcp.shared.message import SessionMessage
        from pydantic import ValidationError

        if not isinstance(item, ValidationError):
            return item
        errors = item.errors()
        first = errors[0]
        if first["type"] == "json_invalid" and isinstance(first["input"], str):
            try:
                message = json.loads(first["input"])  # Python's reader takes a lone surrogate
            except ValueError:
                return item  # not JSON at all (a stray log line): dropped, as the SDK does
            if not isinstance(message, dict):
                return item
            mended = self._mended(message)
            if mended is not None:
                return SessionMessage(mended)
            why = first["msg"]
        else:  # valid JSON of the wrong shape: an answer lacks `method`, which names it whole
            whole = [e["input"] for e in errors if e["loc"][1:] == ("method",)]
            if not whole or not isinstance(whole[0], dict):
                return item
            message = whole[0]
            kind = "JSONRPCError" if "error" in message else "JSONRPCResponse"
            why = next(
                (
                    f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}"
                    for e in errors
                    if e["loc"][0] == kind
                ),
                first["msg"],
            )
        request_id = message.get("id")
        if "method" in message or type(request_id) not in (int, str):  # not bool, not None
            return item  # not an answer: no call of ours waits for it
        error = types.ErrorData(
            code=types.PARSE_ERROR, message=f"its answer is not valid JSON-RPC: {why}"
        )
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))

    def _mended(self, message: dict[str, Any]) -> Any:
        """`message` with each lone surrogate read as U+FFFD, when that makes it valid."""
        import mcp_types as types
        from pydantic import ValidationError

        text = json.dumps(message, ensure_ascii=False)
        mended = _SURROGATE.sub("\ufffd", text)
        if mended == text:
            return None
        try:
            parsed = types.jsonrpc_message_adapter.validate_json(mended, by_name=False)
        except ValidationError:
            return None
        log.warning("MCP server %s: a lone surrogate in a message was read as U+FFFD", self._server)
        return parsed
