"""Shared pieces of the browser tests: skip without Playwright or Chromium, open the page,
send a message, and read what the page shows."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes.page_socket import PageSocket
from tests.ui.conftest import CHROMIUM

pw = pytest.importorskip(
    "playwright.async_api",
    reason="the playwright package is missing (scripts/test-deps.sh installs it into .venv)",
)
if CHROMIUM is None:
    pytest.skip(
        "Debian's chromium-headless-shell is missing (scripts/test-deps.sh installs it)",
        allow_module_level=True,
    )

expect = pw.expect
expect.set_options(timeout=10_000)


async def open_page(page: Any, url: str) -> None:
    await page.goto(url)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")


async def send(page: Any, message: str) -> None:
    await page.locator("#message").fill(message)
    await page.locator("#message").press("Enter")


async def start_run(page: Any, fake: PageSocket, text: str, *, max_steps: int = 10) -> None:
    """Send `text` from the page and start its agent run on the page's fake socket, at step 1."""
    await send(page, text)
    await fake.wait_sent(lambda f: f["type"] == "chat" and f["content"] == text)
    fake.new_run()
    fake.emit("agent_user_message", content=text, agent_mode=True)
    fake.emit("agent_start", max_steps=max_steps)
    fake.emit("agent_turn_start", step=1)


async def open_chats(page: Any, viewport: str) -> None:
    """Make the chat list reachable: on a phone it is in the drawer behind the menu button."""
    if viewport == "phone" and not await page.locator("body.drawer-open").count():
        await page.locator("#menu").click()
    await expect(page.locator("#sessions")).to_be_in_viewport()


async def clipboard(page: Any) -> str:
    text: str = await page.evaluate("() => navigator.clipboard.readText()")
    return text


async def allow_clipboard(page: Any, url: str) -> None:
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
