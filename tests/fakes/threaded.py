"""The agent server and the fake LLM on a background thread, for synchronous clients
(hypothesis drives its examples synchronously)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.app import create_app
from server.runner import AgentServer
from server.settings import load_settings
from tests.fakes.openai_server import FakeLLM
from tests.fakes.servers import run_server, serve


@dataclass
class ThreadedServer:
    address: str
    app: Any
    loop: asyncio.AbstractEventLoop

    def call(self, coro: Any, timeout: float = 10.0) -> Any:
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextmanager
def threaded_server(db: Path, **sections: dict[str, Any]) -> Iterator[ThreadedServer]:
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        stop = asyncio.Event()
        box["stop"] = stop
        fake = FakeLLM()
        async with serve(fake.app) as llm:
            overrides: dict[str, dict[str, Any]] = {
                "llm": {"base_url": f"http://{llm}/v1", "max_retries": 0},
                "storage": {"sqlite_path": str(db)},
            }
            for name, values in sections.items():
                overrides.setdefault(name, {}).update(values)
            app = create_app(load_settings(None, overrides))
            async with run_server(app, AgentServer) as handle:
                box["server"] = ThreadedServer(handle.address, app, asyncio.get_running_loop())
                ready.set()
                await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the test thread below
            box["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="agent-server", daemon=True)
    thread.start()
    if not ready.wait(30) or "error" in box:
        raise RuntimeError(f"server thread failed to start: {box.get('error')!r}")
    server: ThreadedServer = box["server"]
    try:
        yield server
    finally:
        server.loop.call_soon_threadsafe(box["stop"].set)
        thread.join(30)
