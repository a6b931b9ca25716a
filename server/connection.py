"""Connection: one WebSocket's outbound side, a bounded queue (`SubscriberQueue`, shared with
AG-UI streams) drained by its own task.

The run never waits for a socket: `deliver` only queues. A client that stops reading fills its
queue, and the connection is closed with 1013 so it can resume from the stored events with
`after_seq`, instead of slowing the run or growing memory.

A stop overtakes stale deltas: when the client that sent it still has more than
`OVERTAKE_AFTER` frames waiting, the text deltas among them, and those that arrive until the
run's `response_complete`, are not sent to it (all other frames are, in order). Its `seq`s
then jump; every skipped delta is stored and can be replayed with `after_seq`.
"""

from __future__ import annotations

import asyncio

from starlette.websockets import WebSocket, WebSocketDisconnect

from agent.events import AnswerDelta, ChatDelta, ObserveDelta, ReasonDelta, ThinkingDelta
from server.events import Event, RunEnded
from server.subscriber_queue import SubscriberQueue

__all__ = ["FRAMES_PER_TURN", "Connection", "OVERFLOW_CLOSE_CODE"]

OVERFLOW_CLOSE_CODE = 1013
OVERTAKE_AFTER = 32  # queued frames; below this a stopping client gets every delta
FRAMES_PER_TURN = 16  # frames sent in a row before the writer yields to the event loop

# What the connection needs to know of a frame: a text delta (what a stop may leave out),
# the run's end (from which every delta is sent again), or anything else (always sent, as a
# frame sent to this connection only, an error about what it sent).
_DELTA, _END, _OTHER = "delta", "end", ""
_DELTAS = (ReasonDelta, ObserveDelta, AnswerDelta, ThinkingDelta, ChatDelta)


def _kind(event: Event) -> str:
    if isinstance(event.event, _DELTAS):
        return _DELTA
    return _END if isinstance(event.event, RunEnded) else _OTHER


class Connection:
    """Subscriber for one socket. Frames queued while `holding` wait until `release`."""

    def __init__(self, websocket: WebSocket, max_queued: int, max_bytes: int = 16 << 20) -> None:
        self._ws = websocket
        self._max = max_queued
        self._max_bytes = max_bytes  # frames are up to ~1 MiB: a count alone bounds little
        # Each frame's text and kind; on overflow the socket is closed at once (1013).
        self._queue: SubscriberQueue[str] = SubscriberQueue(max_queued, max_bytes, "drop")
        self._held: list[tuple[str, int | None, str]] | None = None
        self._held_chars = 0  # counted with the queue's against `max_bytes`
        self._replayed_up_to = 0  # stored events this socket got by replay, not live
        self._close_code: int | None = None
        self._closed = asyncio.Event()
        self._skipping = False  # this client stopped the run: its stale deltas are left out
        self.skipped = 0  # deltas left out so far

    def hold(self) -> None:
        """Keep live frames aside while the session frame and the replay are queued."""
        self._held = []

    def release(self, replayed_up_to: int) -> None:
        """Queue the frames held back, skipping those the replay already contained.

        Those are also skipped when they arrive later: an event is readable in the store
        once its batch commits, a moment before its session delivers it, so the replay can
        send an event that is delivered live only after this release.
        """
        held, self._held, self._held_chars = self._held or [], None, 0
        self._replayed_up_to = replayed_up_to
        for text, seq, kind in held:
            self._accept(text, seq, kind)

    @property
    def overflowed(self) -> asyncio.Event:
        """Set once the client fell behind: the socket is to be closed with 1013."""
        return self._queue.overflowed

    def deliver(self, text: str, seq: int | None, event: Event) -> None:
        """Queue `text`, sent as it is; `event` says what it is."""
        self._accept(text, seq, _kind(event))

    def _accept(self, text: str, seq: int | None, kind: str) -> None:
        if seq is not None and seq <= self._replayed_up_to:
            return  # the replay sent it (see `release`)
        if self._held is not None:
            self._held.append((text, seq, kind))
            self._held_chars += len(text)
            if (
                len(self._held) > self._max
                or self._queue.chars + self._held_chars > self._max_bytes
            ):
                self._queue.overflow()
            return
        self._put(text, kind)

    def send(self, text: str) -> None:
        """Queue a frame for this connection only (an error about what it sent)."""
        self._put(text, _OTHER)

    def overtake_deltas(self) -> None:
        """This client asked for a stop: let `agent_stopped` overtake the deltas it has not
        been sent yet, if there are many (see the module docstring)."""
        if len(self._queue) <= OVERTAKE_AFTER:
            return
        self.skipped += self._queue.keep(lambda kind: kind != _DELTA)
        self._skipping = not any(kind == _END for _, kind in self._queue)

    def _put(self, text: str, kind: str) -> None:
        if self.overflowed.is_set():
            return
        if self._skipping:
            if kind == _DELTA:
                self.skipped += 1
                return
            if kind == _END:
                self._skipping = False
        self._queue.put(text, kind)

    def finish(self, code: int) -> None:
        """Send what is queued, then close with `code` (e.g. 1001 when the server goes away)."""
        self._close_code = code
        self._queue.end()

    async def wait_closed(self) -> None:
        """Return once `finish` has closed the socket."""
        await self._closed.wait()

    async def write_forever(self) -> None:
        """Send queued frames in order. A send does not yield while the socket takes the
        bytes, so every `FRAMES_PER_TURN` frames the writer lets the other tasks run (this
        socket's reader among them), not after each frame: a yield is a turn of the event
        loop, which costs about as much as a frame.

        Returns after closing the socket when `finish` was called and the queue is empty.
        """
        sent = 0  # frames sent since the queue was last empty
        while (item := await self._queue.get()) is not None:
            try:
                await self._ws.send_text(item[0])
            except (WebSocketDisconnect, RuntimeError, OSError):
                return  # the peer is gone; the reader notices and cleans up
            sent += 1
            if not self._queue:
                sent = 0
            elif sent % FRAMES_PER_TURN == 0:
                await asyncio.sleep(0)  # let the others run between two runs of frames
        try:  # `finish` was called and everything queued is sent
            await self._ws.close(code=self._close_code or 1000)
        finally:
            self._closed.set()
