"""Connection-level defences that sit below the ASGI app, in uvicorn's HTTP protocol.

- A cap on open connections (HTTP and WebSocket together), so idle sockets cannot use up
  the process's file descriptors. At the cap, a newcomer takes the slot of the oldest
  connection that has not sent a complete request head yet and has no bytes of one waiting
  to be read (anonymous and half-open: a client that means it sends its head at once).
  One source address may hold `max_silent_per_source` such connections: its next one takes
  the slot of its own oldest, so a flood from one address churns only its own slots.
  With none of those, one more is answered `503 Service Unavailable` and closed at once.
  `HEALTH_SLOTS` more may each ask `GET /healthz` (within `HEALTH_HEAD_TIMEOUT_S`), so that
  a process full of clients is not taken for a dead one and restarted by its orchestrator's
  liveness probe; any other request on them is the 503. A probe that must be answered
  whatever the main port endures has its own listener (`server.health_port`,
  server/health.py).
- A deadline for each request head (the WebSocket handshake request included): a client
  that has not sent a complete head `request_timeout_s` after connecting, or after its
  previous response, gets `408` and is closed.
- Limits on the head: a request line over 8 KB is `414`, a header line over 8 KB, more than
  100 headers or a head over 64 KB is `431`. (uvicorn's WebSocket parser would otherwise
  drop such a request without any answer.)
- The process's open-file limit is raised to its hard limit at start, and asyncio's error
  reports (e.g. "accept() out of system resource") and uvicorn's per-request warnings
  ("Invalid HTTP request received.") are logged at most once per interval each.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import logging
import resource
import sys
import termios
import time
from collections import OrderedDict
from typing import Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = [
    "HEALTH_SLOTS",
    "MAX_HEADERS",
    "MAX_HEAD_BYTES",
    "HeadScan",
    "LingeringWebSocketProtocol",
    "MAX_LINE_BYTES",
    "RateLimitedExceptionHandler",
    "RepeatedLogFilter",
    "connection_cap",
    "guarded_protocol",
    "raise_open_file_limit",
]

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 8_192  # the request line or one header line, CRLF excluded
MAX_HEAD_BYTES = 65_536
MAX_HEADERS = 100
FD_RESERVE = 256  # descriptors kept for the store, the LLM, web_fetch and its workers
HEALTH_SLOTS = 8  # connections past the cap that may only ask for /healthz
HEALTH_HEAD_TIMEOUT_S = 2.0  # how long one of those may take to send its request head
LINGER_S = 2.0  # how long a failed WebSocket is read (and discarded) before it is closed
_SILENT_SCAN = 64  # connections looked at for one that is silent, oldest first
_HEALTH_CHECKS = (b"GET /healthz ", b"GET /healthz?", b"HEAD /healthz ", b"HEAD /healthz?")

_REASONS = {
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def raise_open_file_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1_048_576)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


def connection_cap(configured: int) -> int:
    """The connection cap in force: the configured one, kept below the descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft - FD_RESERVE))


class HeadScan:
    """A request head as it arrives, checked for the limits above line by line. Each byte is
    searched once (a head trickled in a few bytes at a time was split whole at every read:
    the CPU grew with the square of its size)."""

    __slots__ = ("_at", "_ended", "_from", "_head", "_lines")

    def __init__(self) -> None:
        self._head = bytearray()
        self.clear()

    def clear(self) -> None:
        self._head.clear()
        self._at = 0  # where the line being read starts
        self._from = 0  # where the search for its end goes on
        self._lines = 0  # complete lines before it
        self._ended = False  # the blank line that ends the head was read

    def __len__(self) -> int:
        return len(self._head)

    def startswith(self, prefixes: tuple[bytes, ...]) -> bool | None:
        """Does the head begin with one of `prefixes`? None while it could still."""
        start = bytes(self._head[: max(map(len, prefixes))])
        if start.startswith(prefixes):
            return True
        return None if any(p.startswith(start) for p in prefixes) else False

    def feed(self, data: bytes) -> int | None:
        """Add `data`; return the status that refuses the head so far, or None."""
        head = self._head
        head += data
        while not self._ended:
            end = head.find(b"\r\n", self._from)
            if end < 0:
                self._from = max(self._at, len(head) - 1)  # a CR may be the last byte
                break
            if end == self._at and self._at > 0:
                self._ended = True  # a blank line after a line: the end of the head
                break
            if end - self._at > MAX_LINE_BYTES:
                return 414 if self._lines == 0 else 431
            self._lines += 1
            self._at = self._from = end + 2
        if not self._ended and len(head) - self._at > MAX_LINE_BYTES:
            return 414 if self._lines == 0 else 431
        size = self._at if self._ended else len(head)
        if size > MAX_HEAD_BYTES or self._lines + 1 > MAX_HEADERS + 2:
            return 431
        return None


class _Silent:
    """Connections that have not sent their first complete head, oldest first, in all and
    per source address: the first of them yields its slot to a newcomer."""

    def __init__(self) -> None:
        self.all: OrderedDict[Any, str] = OrderedDict()  # protocol -> its source
        self.by_source: dict[str, OrderedDict[Any, None]] = {}

    def add(self, connection: Any, source: str) -> None:
        self.all[connection] = source
        self.by_source.setdefault(source, OrderedDict())[connection] = None

    def discard(self, connection: Any) -> None:
        source = self.all.pop(connection, None)
        if source is None:
            return
        mine = self.by_source[source]
        del mine[connection]
        if not mine:
            del self.by_source[source]

    def count(self, source: str) -> int:
        return len(self.by_source.get(source, ()))

    def yield_oldest(self, source: str | None = None) -> bool:
        """Close the oldest silent connection (of `source`, if given); one with bytes of its
        head on the way is passed over. False if there is none."""
        queue: OrderedDict[Any, Any] = (
            self.all if source is None else self.by_source.get(source, OrderedDict())
        )
        for candidate in list(itertools.islice(queue, _SILENT_SCAN)):
            if not candidate._sending():
                self.discard(candidate)
                candidate._yield_slot()
                return True
        return False


def guarded_protocol(
    max_connections: int,
    request_timeout_s: float,
    write_timeout_s: float,
    max_silent_per_source: int,
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the cap, the head deadline, the head limits, and a limit on
    how long a response may wait for a client that reads nothing (a streamed body, /events or
    AG-UI's SSE, would otherwise hold its pages and its session until the socket closes)."""
    silent = _Silent()

    class GuardedH11Protocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _stalled: asyncio.TimerHandle | None = None
        _head: HeadScan

        _health_only = False  # one of the HEALTH_SLOTS past the cap

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            open_now = len(self.connections)
            super().connection_made(transport)
            self._head = HeadScan()
            peer = transport.get_extra_info("peername")
            source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            if silent.count(source) >= max_silent_per_source and silent.yield_oldest(source):
                open_now -= 1  # one source's flood churns its own slots, nobody else's
            if open_now >= max_connections and silent.yield_oldest():
                open_now = max_connections - 1  # its slot is this one's
            if open_now >= max_connections + HEALTH_SLOTS:
                self._refuse_over_cap()
                return
            self._health_only = open_now >= max_connections
            silent.add(self, source)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            silent.discard(self)
            self._disarm()
            self._reading_again()
            super().connection_lost(exc)

        def _sending(self) -> bool:
            """Whether bytes from the client wait unread (its head is on its way: the loop
            has not read them yet, as when a burst of connections was accepted at once)."""
            sock = self.transport.get_extra_info("socket")
            try:
                waiting = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
            except (OSError, AttributeError, ValueError):
                return False
            return int.from_bytes(waiting, sys.byteorder) > 0

        def _yield_slot(self) -> None:
            log.debug("closed a connection that sent no request head, for a newcomer")
            if self._head or self.conn.trailing_data[0]:
                self._refuse_over_cap()
            else:
                self._disarm()
                self.transport.close()

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._stalled is None:
                self._stalled = self.loop.call_later(write_timeout_s, self._write_timed_out)

        def resume_writing(self) -> None:
            super().resume_writing()
            self._reading_again()

        def _reading_again(self) -> None:
            if self._stalled is not None:
                self._stalled.cancel()
                self._stalled = None

        def _write_timed_out(self) -> None:
            self._stalled = None
            log.debug("closed a connection whose client read nothing for %.0f s", write_timeout_s)
            self.transport.abort()  # close() would wait for the buffer to drain: never

        def data_received(self, data: bytes) -> None:
            reading_head = self.conn.their_state is h11.IDLE
            if reading_head:
                status = self._head.feed(data)
                if status is not None:
                    self._refuse(status, "The request head is too large.")
                    return
                if self._health_only and self._head.startswith(_HEALTH_CHECKS) is False:
                    self._refuse_over_cap()  # a slot past the cap asks anything but /healthz
                    return
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE or self.transport.get_protocol() is not self:
                silent.discard(self)  # a complete head: no longer anonymous
                self._head.clear()
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # a kept-alive connection must send its next head in time too

        def _refuse_over_cap(self) -> None:
            log.debug("refused a connection: %d are open", len(self.connections) - 1)
            self._refuse(503, "Too many connections; try again shortly.")

        def _arm(self) -> None:
            self._disarm()
            timeout = request_timeout_s
            if self._health_only:
                timeout = min(timeout, HEALTH_HEAD_TIMEOUT_S)
            self._deadline = self.loop.call_later(timeout, self._timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _timed_out(self) -> None:
            self._deadline = None
            if self.transport.get_protocol() is not self or self.transport.is_closing():
                return  # upgraded to a WebSocket, or already closing
            if self.conn.their_state is not h11.IDLE:
                return  # a request is being served
            if self._head or self.conn.trailing_data[0]:  # part of a head (maybe pipelined)
                self._refuse(408, "The request was not completed in time.")
            else:
                self.transport.close()  # nothing sent at all: just close

        def _refuse(self, status: int, message: str) -> None:
            body = message.encode()
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                "content-type: text/plain; charset=utf-8\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            )
            self._disarm()
            self.transport.write(head.encode() + body)
            self.transport.close()

    return GuardedH11Protocol


class LingeringWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, except that a connection it fails (a message
    over `ws_max_size`: 1009) is closed only once its client stopped sending, or after
    `LINGER_S`. Closing a socket with unread data in it sends a reset: a client still
    sending the fragments of an oversized message lost the 1009 close frame before it could
    read it, and saw the connection drop for no reason."""

    _lingering = False

    def data_received(self, data: bytes) -> None:
        if not self._lingering:  # the rest of the refused message: read, not parsed
            super().data_received(data)

    def handle_parser_exception(self) -> None:
        close = self.conn.close_sent
        assert close is not None
        self.queue.put_nowait(
            {"type": "websocket.disconnect", "code": close.code, "reason": close.reason}
        )
        transport = self.transport
        transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self._lingering = True
        if transport.can_write_eof():
            transport.write_eof()  # the client reads the close frame, then our end
        # uvicorn closes the transport once the app has seen the disconnect: not yet. The
        # client's own close (EOF) or the timer ends it.
        self.transport = cast(Any, _Lingering(transport))
        self.loop.call_later(LINGER_S, transport.close)


class _Lingering:
    """A transport whose close() waits: see LingeringWebSocketProtocol."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class RateLimitedExceptionHandler:
    """An asyncio exception handler that logs each distinct message at most once per
    `interval_s`, then how many were suppressed: a fault that repeats thousands of times a
    second (descriptors exhausted) cannot flood the log."""

    def __init__(self, interval_s: float = 10.0) -> None:
        self._throttle = _Throttle(interval_s)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        key = str(context.get("message", ""))[:200]
        held = self._throttle.admit(key)
        if held is None:
            return
        if held:
            context = {**context, "message": f"{key} (and {held} more like it)"}
        loop.default_exception_handler(context)


class _Throttle:
    """Say whether a message may be logged now; count those held back (bounded memory)."""

    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def admit(self, key: str) -> int | None:
        """None: hold this one back; else how many like it were held back since the last."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self._interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        if len(self._last) > 1000:  # distinct messages are few; never grow without bound
            self._last.clear()
            self._suppressed.clear()
        self._last[key] = now
        return self._suppressed.pop(key, 0)


class DenialLogFilter(logging.Filter):
    """Drop uvicorn's "ASGI callable returned without completing handshake." error, which its
    websockets-sansio protocol logs after every handshake refused with a response body (a
    403 that says why, a 503 for a full tenant) although the refusal was complete: every
    handshake of ours is accepted or refused, so the line only ever reports a refusal."""

    QUIRK = "ASGI callable returned without completing handshake."

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != self.QUIRK


class RepeatedLogFilter(logging.Filter):
    """Pass each distinct message at most once per `interval_s` (uvicorn logs one warning
    per malformed request: a flood of them must not become a flood of log lines)."""

    def __init__(self, interval_s: float = 10.0) -> None:
        super().__init__()
        self._throttle = _Throttle(interval_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        held = self._throttle.admit(f"{record.name}:{record.msg}")
        if held is None:
            return False
        if held:
            record.msg = f"{record.msg} (and {held} more like it)"
        return True
