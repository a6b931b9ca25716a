"""Browser fixtures: the agent server on a known port (so its Origin can be allowed), and a
real Chromium driven by Playwright. Playwright is imported lazily: test_browser.py skips the
module when it or Chromium is missing."""

from __future__ import annotations

import asyncio
import shutil
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from server.app import create_app
from server.settings import load_settings
from tests.fakes.openai_server import FakeLLM

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@dataclass
class UIServer:
    url: str  # http://127.0.0.1:PORT/
    address: str  # 127.0.0.1:PORT
    server: uvicorn.Server

    def drop_connections(self) -> int:
        """Cut every open TCP connection, as a network failure would; return how many."""
        connections = list(self.server.server_state.connections)
        for protocol in connections:
            protocol.transport.abort()  # type: ignore[union-attr]
        return len(connections)


UIServerFactory = Callable[..., AbstractAsyncContextManager[UIServer]]


@pytest.fixture
def ui_server_factory(fake_llm: FakeLLM, tmp_path: Path) -> UIServerFactory:
    """Like server_factory, but the port is bound first so the page's Origin is allowed."""

    @asynccontextmanager
    async def start(**sections: dict[str, Any]) -> AsyncIterator[UIServer]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        overrides: dict[str, dict[str, Any]] = {
            "llm": {"base_url": fake_llm.base_url, "max_retries": 1,  # type: ignore[attr-defined]
                    "timeout_s": 10},
            "storage": {"sqlite_path": str(tmp_path / "agent.db")},
            "server": {"shutdown_timeout_s": 5, "allowed_origins": [f"http://{address}"]},
        }
        for name, values in sections.items():
            overrides.setdefault(name, {}).update(values)
        app = create_app(load_settings(None, overrides))
        server = uvicorn.Server(uvicorn.Config(
            app, log_level="warning", lifespan="on", ws="websockets-sansio",
            ws_per_message_deflate=False,
        ))
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            async with asyncio.timeout(10):
                while not server.started:  # uvicorn offers no event to await
                    if task.done():
                        task.result()
                        raise RuntimeError("server exited during startup")
                    await asyncio.sleep(0.005)
            yield UIServer(f"http://{address}/", address, server)
        finally:
            server.should_exit = True
            try:
                async with asyncio.timeout(15):
                    await task
            finally:
                sock.close()

    return start


@pytest.fixture
async def ui_server(ui_server_factory: UIServerFactory) -> AsyncIterator[UIServer]:
    async with ui_server_factory() as running:
        yield running


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def page(browser: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A fresh page; uncaught script errors on it fail the test."""
    context = await browser.new_context(viewport={"width": 1100, "height": 760})
    context.set_default_timeout(10_000)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"

