"""Run ASGI apps under real uvicorn on a free loopback port, inside the test's event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


class ServerHandle:
    """A running uvicorn server: its address, and a way to shut it down (idempotent)."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], address: str) -> None:
        self.server = server
        self.task = task
        self.address = address

    async def stop(self) -> None:
        self.server.should_exit = True
        async with asyncio.timeout(15):
            await asyncio.shield(self.task)


def bind_loopback() -> socket.socket:
    """A socket bound to a free loopback port (bind first when the app must know its address)."""
    # proto=IPPROTO_TCP, as asyncio's own create_server makes it: only then does asyncio turn
    # Nagle off (TCP_NODELAY) on accepted connections; without it every small final write of
    # a response waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def run_server(
    app: Any,
    server_class: type[uvicorn.Server] = uvicorn.Server,
    sock: socket.socket | None = None,
    **config: Any,
) -> AsyncIterator[ServerHandle]:
    """Serve `app` until the block ends (or `stop()`); yield its handle."""
    started = asyncio.Event()

    class Signalled(server_class):  # type: ignore[valid-type,misc]
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            started.set()

    sock = sock or bind_loopback()
    port = sock.getsockname()[1]
    options = {"log_level": "warning", "lifespan": "on", "ws": "websockets-sansio"}
    options.update(config)
    server = Signalled(uvicorn.Config(app, **options))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    handle = ServerHandle(server, task, f"127.0.0.1:{port}")
    try:
        ready = asyncio.create_task(started.wait())
        await asyncio.wait({ready, task}, timeout=10, return_when="FIRST_COMPLETED")
        if not started.is_set():
            ready.cancel()
            if task.done():
                task.result()
            raise RuntimeError("server did not start within 10 s")
        yield handle
    finally:
        try:
            await handle.stop()
        finally:
            sock.close()


@asynccontextmanager
async def serve(
    app: Any, server_class: type[uvicorn.Server] = uvicorn.Server, **config: Any
) -> AsyncIterator[str]:
    """Serve `app`; yield "127.0.0.1:PORT"; shut it down on exit."""
    async with run_server(app, server_class, **config) as handle:
        yield handle.address
