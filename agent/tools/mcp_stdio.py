"""The stdio transport for MCP servers, with a bound on each message a server may send.

The SDK's reader joins its buffer to each 64 KiB read and splits the whole again, so one
long line costs CPU with the square of its length, on the event loop: a tool answering
20 MB took 12.7 s, every tenant waited, the health check timed out and the server was
restarted. This reader is the SDK's (`mcp.client.stdio.stdio_client`: the same process
start, environment and shutdown sequence, whose helpers it calls) with a line reader that
looks at each byte once and keeps at most `max_message_bytes` of a line. A longer line is
skipped to its end, unparsed, and answered for the server as a JSON-RPC error with the
request id found at either end of the line: that call fails, alone, and the server stays up.
A line over 1 MiB is parsed in a worker thread.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    import mcp_types as types
    from anyio.abc import ByteReceiveStream
    from mcp import StdioServerParameters
    from mcp.client._transport import TransportStreams
    from mcp.shared.message import SessionMessage

__all__ = ["TooLong", "bounded_stdio_client", "call_error", "more_than", "read_lines"]

log = logging.getLogger(__name__)

_EDGE = 1024  # bytes kept of each end of a line that is too long, to find its id
_IN_THREAD = 1 << 20  # lines longer than this are parsed off the event loop
_ID = rb'"id"\s*:\s*(-?\d+|"[^"\\]*")'  # an id: a number or a string without escapes
_VERSION = rb'"jsonrpc"\s*:\s*"2\.0"\s*'
_HEAD_ID = re.compile(rb"^\s*\{\s*(?:" + _VERSION + rb",\s*)?" + _ID)
_TAIL_ID = re.compile(rb"[,{]\s*" + _ID + rb"\s*(?:,\s*" + _VERSION + rb")?\}\s*$")


class TooLong:
    """A line longer than the cap: its size and both ends, the rest dropped unread."""

    __slots__ = ("head", "size", "tail")

    def __init__(self, head: bytes, tail: bytes, size: int) -> None:
        self.head, self.tail, self.size = head, tail, size

    def request_id(self) -> int | str | None:
        """The JSON-RPC `id` at the start or the end of the message, if it is there."""
        found = _HEAD_ID.match(self.head) or _TAIL_ID.search(self.tail)
        if found is None:
            return None
        raw = found.group(1)
        return raw[1:-1].decode("utf-8", "replace") if raw.startswith(b'"') else int(raw)


async def read_lines(stream: ByteReceiveStream, cap: int) -> AsyncIterator[bytes | TooLong]:
    """Yield each newline-ended line of `stream` (without the newline), or a TooLong for a
    line over `cap` bytes; each byte is looked at once, and at most `cap` bytes are held."""
    parts: list[bytes] = []
    size = 0
    over: TooLong | None = None
    async for chunk in stream:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            size += len(piece)
            if over is not None:
                over.tail = (over.tail + piece[-_EDGE:])[-_EDGE:]
            else:
                parts.append(piece)
                if size > cap:  # keep both ends, to find the id; drop the rest from now on
                    over = TooLong(_edge(parts), _edge(parts[::-1], tail=True), 0)
                    parts = []
            if end < 0:
                break
            if over is None:
                yield b"".join(parts)
            else:
                over.size = size
                yield over
            parts, size, over = [], 0, None
            start = end + 1


def _edge(parts: list[bytes], tail: bool = False) -> bytes:
    """The first `_EDGE` bytes of `parts` joined (of the reversed list: the last ones)."""
    kept: list[bytes] = []
    length = 0
    for part in parts:
        kept.append(part[-_EDGE:] if tail else part[:_EDGE])
        length += len(part)
        if length >= _EDGE:
            break
    joined = b"".join(kept[::-1] if tail else kept)
    return joined[-_EDGE:] if tail else joined[:_EDGE]


def _parse(line: bytes, encoding: str, errors: str) -> SessionMessage | Exception:
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    try:
        message = types.jsonrpc_message_adapter.validate_json(
            line.decode(encoding, errors), by_name=False
        )
    except ValueError as exc:
        log.warning("An MCP server sent a line that is not JSON-RPC: %s", str(exc)[:200])
        return exc
    return SessionMessage(message)


def _too_long(line: TooLong, cap: int, server: str) -> SessionMessage | None:
    """The error that fails the call `line` answered, or None when its id is not found."""
    from mcp.shared.message import SessionMessage

    request_id = line.request_id()
    log.warning(
        "MCP server %s sent a message of %d bytes (max_message_bytes is %d): %s",
        server,
        line.size,
        cap,
        "its call fails" if request_id is not None else "no request id found, dropped",
    )
    if request_id is None:
        return None
    why = f"its answer was {line.size:,} bytes, {more_than(cap)}"
    return SessionMessage(call_error(request_id, why))


def more_than(cap: int) -> str:
    """What an answer over the cap is, in the error its call gets."""
    return f"more than this server may send (max_message_bytes, {cap:,})"


def call_error(request_id: int | str, message: str) -> types.JSONRPCError:
    """The JSON-RPC error that fails the call `request_id` in place of its answer."""
    import mcp_types as types

    error = types.ErrorData(code=types.INTERNAL_ERROR, message=message)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


@asynccontextmanager
async def bounded_stdio_client(
    params: StdioServerParameters, *, max_message_bytes: int, server: str
) -> AsyncIterator[TransportStreams]:
    """Start the server as the SDK's `stdio_client` does; read its stdout with `read_lines`."""
    from mcp.client import stdio as sdk
    from mcp.shared.message import SessionMessage

    command = await sdk._get_executable_command(params.command)
    process = await sdk._create_platform_compatible_process(
        command=command,
        args=params.args,
        env=sdk.get_default_environment() | (params.env or {}),
        errlog=sys.stderr,
        cwd=params.cwd,
    )
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()
    encoding, errors = params.encoding, params.encoding_error_handler

    async def stdout_reader() -> None:
        assert process.stdout is not None
        try:
            async with to_session:
                try:
                    async for line in read_lines(process.stdout, max_message_bytes):
                        if isinstance(line, TooLong):
                            item: SessionMessage | Exception | None = _too_long(
                                line, max_message_bytes, server
                            )
                        elif len(line) > _IN_THREAD:
                            item = await anyio.to_thread.run_sync(_parse, line, encoding, errors)
                        else:
                            item = _parse(line, encoding, errors)
                        if item is None:
                            continue
                        try:
                            await to_session.send(item)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return
                finally:
                    await sdk._drain_stdout(process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed stdout under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                log.exception("Reading MCP server %s's stdout failed mid-session", server)

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((text + "\n").encode(encoding, errors))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_session.aclose()  # the session sees the end instead of hanging
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await sdk._stop_server_process(process)
        for stream in (read_stream, write_stream, to_session, from_session):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # the process must never be left running
                await shutdown()
            group.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
