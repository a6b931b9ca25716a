"""Browser fixtures: the agent server on a known port (so its Origin can be allowed), and a
real Chromium driven by Playwright. Playwright is imported lazily: test_browser.py skips the
module when it or Chromium is missing."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
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
def ui_server_factory(server_factory: Any) -> UIServerFactory:
    """The agent server (its own page's Origin is allowed), with a handle to cut connections."""

    @asynccontextmanager
    async def start(**sections: dict[str, Any]) -> AsyncIterator[UIServer]:
        sections.setdefault("llm", {}).setdefault("timeout_s", 10)
        async with server_factory(**sections) as running:
            yield UIServer(f"http://{running.address}/", running.address, running.handle.server)

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
