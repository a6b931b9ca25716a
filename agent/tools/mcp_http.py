"""The bound on each message a streamable-HTTP MCP server may send, as stdio has it.

The SDK reads a JSON answer whole (`response.aread()`), however long, and fails an event of an
event stream over its own limit (1 MiB) as if the connection had broken. `bound_messages` is
an httpx response hook that holds each answer to `max_message_bytes`, the stdio cap, before
the SDK sees it: a JSON body or one server-sent event over it is dropped unread from there on,
and in its place comes a JSON-RPC error for the request the POST carried (its id is in the
request's body). That call fails, alone; the connection stays up. An event over the cap on the
GET stream (which answers no request) is dropped and logged. Compressed answers are not asked
for (`IDENTITY`): one that comes compressed anyway could inflate past the cap after this hook,
and fails its call the same way. agent/tools/mcp.py imports this module with the SDK.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2

from agent.tools.mcp_stdio import call_error, more_than

__all__ = ["IDENTITY", "bound_messages"]

log = logging.getLogger(__name__)

IDENTITY = {"Accept-Encoding": "identity"}
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # a blank line ends a server-sent event
_ID_BODY = 1 << 20  # a request body longer than this is not read for its id


def bound_messages(cap: int, server: str) -> Callable[[httpx2.Response], Awaitable[None]]:
    """A response hook that bounds each JSON body and each server-sent event to `cap` bytes."""

    async def hook(response: httpx2.Response) -> None:
        kind = response.headers.get("content-type", "").lower()
        if not kind.startswith(("application/json", "text/event-stream")):
            return
        encoding = response.headers.get("content-encoding", "identity").lower()
        refuse = None if encoding == "identity" else f"its answer came {encoding}-encoded"
        response.stream = _Bound(response, cap, server, refuse)
        response.headers.pop("content-length", None)  # the body may be replaced

    return hook


def _request_id(request: httpx2.Request) -> int | str | None:
    """The JSON-RPC id of the request a POST carried, if it carried one."""
    if request.method != "POST":
        return None
    try:
        body = request.content
    except httpx2.RequestNotRead:  # a streamed body (the SDK sends none): no id to be had
        return None
    try:
        message = json.loads(body) if len(body) <= _ID_BODY else None
    except ValueError:
        return None
    found = message.get("id") if isinstance(message, dict) else None
    return found if isinstance(found, int | str) and not isinstance(found, bool) else None


class _Bound(httpx2.AsyncByteStream):
    """A response body passed on a message at a time, none over `cap` bytes; with `refuse`
    (why), none at all: its call's error instead."""

    def __init__(self, response: httpx2.Response, cap: int, server: str, refuse: str | None):
        self._inner = response.stream
        self._events = response.headers.get("content-type", "").lower().startswith("text/")
        self._cap, self._server, self._refuse = cap, server, refuse
        self._request_id = _request_id(response.request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx2.AsyncByteStream)
        if self._refuse is not None:
            await self._inner.aclose()
            yield self._error(self._refuse)
            return
        source = self._inner.__aiter__()
        messages = _events(source, self._cap) if self._events else _whole(source, self._cap)
        async for message in messages:
            if message is not None:
                yield message
                continue
            yield self._error(f"its answer was too long: {more_than(self._cap)}")
            if not self._events:
                await self._inner.aclose()  # the rest is left unread
                return

    async def aclose(self) -> None:
        assert isinstance(self._inner, httpx2.AsyncByteStream)
        await self._inner.aclose()

    def _error(self, why: str) -> bytes:
        """What comes instead of the answer: its call's error, or (no call) nothing."""
        log.warning(
            "MCP server %s: %s; %s",
            self._server,
            why,
            "its call fails" if self._request_id is not None else "no call, dropped",
        )
        if self._request_id is None:
            return b""
        error = call_error(self._request_id, why).model_dump_json(by_alias=True)
        return f"event: message\ndata: {error}\n\n".encode() if self._events else error.encode()


async def _whole(source: AsyncIterator[bytes], cap: int) -> AsyncIterator[bytes | None]:
    """The body at once, or None once it is over `cap`."""
    parts: list[bytes] = []
    size = 0
    async for chunk in source:
        size += len(chunk)
        if size > cap:
            yield None
            return
        parts.append(chunk)
    yield b"".join(parts)


async def _events(source: AsyncIterator[bytes], cap: int) -> AsyncIterator[bytes | None]:
    """Each server-sent event with its blank line, or None for one over `cap`, which is
    dropped as it arrives: at most `cap` bytes and a chunk are held."""
    held = bytearray()
    dropping = False
    async for chunk in source:
        look_from = max(0, len(held) - 3)  # a blank line may straddle two chunks
        held += chunk
        while (end := _EVENT_END.search(held, look_from)) is not None:
            event = bytes(held[: end.end()])
            del held[: end.end()]
            look_from = 0
            yield None if dropping or len(event) > cap else event
            dropping = False
        if len(held) > cap:
            dropping = True
            del held[:-3]
    if held and not dropping:
        yield bytes(held)
