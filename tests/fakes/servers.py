"""Run ASGI apps under real uvicorn on a free loopback port, inside the test's event loop.

uvicorn notices `should_exit` on a 0.1 s tick, then sleeps 0.1 s before closing connections
and polls every 0.1 s until they are gone: about 0.25 s per server, paid twice by every test
that starts the agent and the fake LLM. `run_server` serves with the same uvicorn code, except
that those waits are replaced by waits on events: the exit flag and uvicorn's own sets of
connections and request tasks signal when they change. The shutdown's order and its bound
(`timeout_graceful_shutdown`) stay uvicorn's.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


class _Watched(set[Any]):
    """A set that sets `emptied` whenever its last member leaves (uvicorn adds and discards
    its connections and request tasks in such sets)."""

    def __init__(self) -> None:
        super().__init__()
        self.emptied = asyncio.Event()
        self.emptied.set()

    def add(self, item: Any) -> None:
        super().add(item)
        self.emptied.clear()

    def discard(self, item: Any) -> None:
        super().discard(item)
        if not self:
            self.emptied.set()

    def remove(self, item: Any) -> None:
        super().remove(item)
        if not self:
            self.emptied.set()

    async def drained(self) -> None:
        while self:
            await self.emptied.wait()


class PromptServer(uvicorn.Server):
    """uvicorn's Server that reacts to `should_exit` at once and shuts down without fixed
    sleeps (see the module docstring); a subclass such as AgentServer goes before it."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit = asyncio.Event()
        super().__init__(config)
        self.server_state.connections = _Watched()
        self.server_state.tasks = _Watched()

    @property  # type: ignore[override]
    def should_exit(self) -> bool:
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()
        else:
            self._exit.clear()

    async def main_loop(self) -> None:
        ticks = 0
        while not await self.on_tick(ticks):  # tick 0, 10, 20…: the Date header, once a second
            ticks = (ticks + 10) % 864000
            try:
                await asyncio.wait_for(self._exit.wait(), 1.0)
            except TimeoutError:
                pass

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                await self._wait_tasks_to_complete()
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _wait_tasks_to_complete(self) -> None:
        connections, tasks = self.server_state.connections, self.server_state.tasks
        assert isinstance(connections, _Watched) and isinstance(tasks, _Watched)
        await connections.drained()
        await tasks.drained()
        for server in self.servers:
            await server.wait_closed()


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

    bases = (PromptServer,) if server_class is uvicorn.Server else (server_class, PromptServer)

    class Signalled(*bases):  # type: ignore[misc]
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
