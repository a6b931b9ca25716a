"""Browser fixtures: the agent server on a known port (so its Origin can be allowed), and a
real Chromium driven by Playwright. Playwright is imported lazily: test_browser.py skips the
module when it or Chromium is missing.

One Chromium serves every browser test of a pytest process (starting Playwright's driver and
the browser costs about a second); each test still gets a fresh browser context (its own
cookies, storage and viewport). Playwright's objects belong to the event loop that made them,
so every test under tests/ui, and the async fixtures it uses, run on pytest-asyncio's session
loop.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import uvicorn

from tests.conftest import Running, served_fake_llm
from tests.fakes.openai_server import FakeLLM

# Debian's chromium-headless-shell: Chromium's headless-only build, what Playwright itself runs
# for headless tests; the same engine at a third of the full browser's CPU in this suite. The
# full browser when only it is installed. None: neither, and the browser tests are skipped.
CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")
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


VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests under tests/ui on the session loop, where the shared browser lives."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.asyncio(loop_scope="session"), append=False)


@pytest_asyncio.fixture(loop_scope="session")
async def fake_llm() -> AsyncIterator[FakeLLM]:
    """The root fixture of that name, on the session loop."""
    async with served_fake_llm() as fake:
        yield fake


@pytest_asyncio.fixture(loop_scope="session")
async def server(server_factory: Any) -> AsyncIterator[Running]:
    """The root fixture of that name, on the session loop."""
    async with server_factory() as running:
        yield running


@pytest.fixture(scope="session")
def ui_artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $UI_ARTIFACTS, else pytest's temporary folder (never the repo)."""
    configured = os.environ.get("UI_ARTIFACTS")
    folder = Path(configured) if configured else tmp_path_factory.getbasetemp() / "ui-artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(params=list(VIEWPORTS))
def viewport(request: pytest.FixtureRequest) -> str:
    """Run the test once on a desktop (1280×800) and once on a phone (390×844) viewport."""
    return str(request.param)


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
Snap = Callable[[str], Awaitable[None]]


@pytest.fixture
def ui_server_factory(server_factory: Any) -> UIServerFactory:
    """The agent server (its own page's Origin is allowed), with a handle to cut connections."""

    @asynccontextmanager
    async def start(**sections: dict[str, Any]) -> AsyncIterator[UIServer]:
        sections.setdefault("llm", {}).setdefault("timeout_s", 10)
        async with server_factory(**sections) as running:
            yield UIServer(f"http://{running.address}/", running.address, running.handle.server)

    return start


@pytest_asyncio.fixture(loop_scope="session")
async def ui_server(ui_server_factory: UIServerFactory) -> AsyncIterator[UIServer]:
    async with ui_server_factory() as running:
        yield running


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    """One Chromium for the whole session; tests open their own contexts in it."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        assert CHROMIUM is not None  # the modules that use this fixture skip without it
        chromium = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A fresh page (the `viewport` parameter's size when the test uses it, else desktop);
    uncaught script errors on it fail the test."""
    name = request.getfixturevalue("viewport") if "viewport" in request.fixturenames else "desktop"
    phone = name == "phone"
    context = await browser.new_context(
        viewport=VIEWPORTS[name], is_mobile=phone, has_touch=phone, device_scale_factor=1
    )
    context.set_default_timeout(10_000)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def snap(page: Any, ui_artifacts: Path, request: pytest.FixtureRequest) -> Snap:
    """`await snap("name")`: a screenshot of the page, kept as a test artifact."""
    suffix = f"-{request.getfixturevalue('viewport')}" if "viewport" in request.fixturenames else ""

    async def take(name: str) -> None:
        await page.screenshot(path=str(ui_artifacts / f"{name}{suffix}.png"))

    return take
