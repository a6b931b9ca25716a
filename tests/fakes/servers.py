"""Run ASGI apps under real uvicorn on a free loopback port, inside the test's event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


@asynccontextmanager
async def serve(app: Any, **config: Any) -> AsyncIterator[str]:
    """Serve `app`; yield "127.0.0.1:PORT"; shut it down on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    options = {"log_level": "warning", "lifespan": "on", "ws": "websockets-sansio"}
    options.update(config)
    server = uvicorn.Server(uvicorn.Config(app, **options))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("server exited during startup")
                await asyncio.sleep(0.005)
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        try:
            async with asyncio.timeout(15):
                await task
        finally:
            sock.close()
