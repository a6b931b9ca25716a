"""A listener of its own for health probes (`server.health_port`).

On the main port a probe competes with everyone: a flood of idle sockets that reopened each
one the server closed got 225 of ~350 `/healthz` probes a 503, and an orchestrator restarts
a process that fails its probes, dropping every client. This listener answers `GET /healthz`
(and `HEAD`, and `/` for load balancers that probe the root) with the same body, and
nothing else: no app, no auth, no WebSocket. It has its own small connection cap and head
deadline, so it stays answerable while the main port is under attack; keep the port off
the public network (docs/deploy.md). Under `serve --workers N` each worker binds it with
SO_REUSEPORT, like the main port.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, cast

__all__ = ["HealthListener"]

log = logging.getLogger(__name__)

_MAX_HEAD = 8192
_PATHS = (b"/healthz", b"/")


class HealthListener:
    """Serve `check()` as JSON on (host, port) until `aclose()`."""

    def __init__(
        self,
        check: Callable[[], dict[str, Any]],
        *,
        max_connections: int = 64,
        head_timeout_s: float = 2.0,
    ) -> None:
        self.check = check
        self.max_connections = max_connections
        self.head_timeout_s = head_timeout_s
        self.open = 0
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Probe(self), host, port, reuse_port=True)
        log.info("health checks served on http://%s:%d/healthz", host, port)

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()


class _Probe(asyncio.Protocol):
    """One probe connection: read a head (bounded in size and time), answer, close."""

    def __init__(self, listener: HealthListener) -> None:
        self._listener = listener
        self._head = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        listener = self._listener
        listener.open += 1
        if listener.open > listener.max_connections:
            self._answer(503, b"Too many connections.")
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(listener.head_timeout_s, self._transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener.open -= 1
        if self._timer is not None:
            self._timer.cancel()

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self._head += data
        if b"\r\n\r\n" not in self._head and b"\n\n" not in self._head:
            if len(self._head) > _MAX_HEAD:
                self._answer(431, b"The request head is too large.")
            return
        method, _, rest = bytes(self._head).partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        if method not in (b"GET", b"HEAD") or path not in _PATHS:
            self._answer(404, b"Only GET /healthz is served here.")
            return
        body = json.dumps(self._listener.check()).encode()
        self._answer(200, body, b"application/json", send_body=method == b"GET")

    def _answer(
        self,
        status: int,
        body: bytes,
        kind: bytes = b"text/plain; charset=utf-8",
        send_body: bool = True,
    ) -> None:
        assert self._transport is not None
        reason = {200: b"OK", 404: b"Not Found", 431: b"Too Large", 503: b"Unavailable"}
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
            b"cache-control: no-store\r\nconnection: close\r\n\r\n"
            % (status, reason[status], kind, len(body))
        )
        self._transport.write(head + body if send_body else head)
        self._transport.close()
