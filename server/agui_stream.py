"""An AG-UI response's stream: a session subscriber with a bounded queue (`SubscriberQueue`,
the one a `/ws` connection uses), read by the response and translated into server-sent
events, a comment line when nothing comes for a while.

`POST /agui` (server/agui.py) and `POST /agui/connect` (server/agui_connect.py) both stream
through it. Like a `/ws` connection's queue, it never slows the run: a client that reads too
slowly loses its stream (RUN_ERROR `stream_closed`), not the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

from ag_ui.core import BaseEvent, RunErrorEvent
from ag_ui.encoder import EventEncoder

from server.agui_events import Translator
from server.events import Event
from server.live import LiveSession
from server.services import Services
from server.subscriber_queue import SubscriberQueue

__all__ = ["KEEPALIVE_S", "Stream", "encode", "follow", "open_stream", "served"]

_SESSION_GONE = 4404  # what DELETE /api/sessions/{id} closes watchers with
# A proxy closes a response that sends nothing for a while (nginx: 60 s by default): a
# comment line keeps it open.
KEEPALIVE_S = 15.0
_KEEPALIVE = ": keepalive\n\n"
_ENCODER = EventEncoder()  # holds no state: one serves every response


class Stream:
    """A session subscriber feeding one SSE response; its queue is bounded like a socket's."""

    def __init__(self, max_queued: int, max_bytes: int) -> None:
        # On overflow what is queued is still sent, then the stream ends (RUN_ERROR).
        self._queue: SubscriberQueue[Event | None] = SubscriberQueue(max_queued, max_bytes, "end")
        self.close_code: int | None = None
        self._closed = asyncio.Event()

    def deliver(self, text: str, seq: int | None, event: Event | None = None) -> None:
        """Queue `event` to translate; its `text` counts against the bound in bytes, as on a
        socket (a bare text, without `event`, is counted and has nothing to translate)."""
        if self.close_code is None:  # after `finish` the stream only ends
            self._queue.put(text, event)

    @property
    def overflowed(self) -> bool:
        """The client read too slowly: the stream ends after what was queued."""
        return self._queue.overflowed.is_set()

    async def take(self) -> tuple[str, Event | None] | None:
        """The next event's text and event, or None: the stream ends."""
        return await self._queue.get()

    async def next(self) -> str | None:
        """The next frame's text, or None: the stream ends."""
        item = await self.take()
        return None if item is None else item[0]

    def finish(self, code: int) -> None:
        self.close_code = code
        self._queue.end()

    def why(self) -> str:
        if self.overflowed:
            return "the client read too slowly; the run goes on"
        if self.close_code == _SESSION_GONE:
            return "the session was deleted"
        return "the server is going away; the run is being stopped"

    def closed(self) -> None:
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()


def open_stream(services: Services, live: LiveSession) -> Stream:
    """A stream bounded as the server's settings say, subscribed to `live` from now on."""
    server = services.settings.server
    stream = Stream(server.outbound_queue_size, server.outbound_queue_bytes)
    live.subscribe(stream)
    return stream


def encode(events: list[BaseEvent]) -> str:
    """`events` as server-sent events."""
    return "".join(_ENCODER.encode(event) for event in events)


async def served(
    services: Services, live: LiveSession, stream: Stream, events: AsyncGenerator[str, None]
) -> AsyncIterator[str]:
    """Yield `events`; however the response ends, unsubscribe `stream` and let go of the
    session."""
    try:
        async with aclosing(events) as texts:
            async for text in texts:
                yield text
    finally:
        live.unsubscribe(stream)
        stream.closed()
        services.hub.release(live)


async def follow(
    stream: Stream, translator: Translator, after_seq: int = 0, keepalive_s: float = KEEPALIVE_S
) -> AsyncIterator[str]:
    """The run's live frames, translated, until it ends or the stream does; a comment line
    while nothing comes for `keepalive_s`. Frames of other runs, and those up to
    `after_seq` (already shown), are left out."""
    while not translator.done:
        try:
            async with asyncio.timeout(keepalive_s):
                item = await stream.take()
        except TimeoutError:
            yield _KEEPALIVE  # a run thinking quietly, a question waiting, text held
            continue
        if item is None:
            message = f"The stream ended: {stream.why()}."
            yield encode([RunErrorEvent(message=message, code="stream_closed")])
            return
        event = item[1]
        if event is None or event.run_id != translator.run_id:
            continue
        if event.seq is not None and event.seq <= after_seq:
            continue
        out = translator.translate(event)
        if out:
            yield encode(out)
