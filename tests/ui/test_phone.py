"""Phones (390×844): the chat list is a drawer behind a menu button, New chat is in the top
bar, and the page never scrolls sideways (issue 12, item 11). The question banner's height
on a phone is checked in test_questions.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.fakes.openai_server import FakeLLM
from tests.ui.helpers import expect, open_page, send


@pytest.fixture
def viewport() -> str:
    return "phone"


async def test_the_chat_list_is_a_drawer_on_a_phone(
    ui_server: Any, page: Any, fake_llm: FakeLLM, viewport: str, snap: Any
) -> None:
    await open_page(page, ui_server.url)
    drawer, menu = page.locator("#drawer"), page.locator("#menu")
    await expect(drawer).not_to_be_in_viewport()
    await expect(menu).to_be_visible()
    await expect(menu).to_have_attribute("aria-expanded", "false")
    for button in (menu, page.locator("#new-chat-top")):  # a finger's target on a phone
        box = await button.bounding_box()
        assert box["width"] >= 44 and box["height"] >= 44, box
    await send(page, "First chat on the phone")
    await expect(page.locator("article.run")).to_have_class(re.compile(r"\bcomplete\b"))
    await page.locator("#new-chat-top").click()  # New chat without opening the drawer
    await expect(page.locator("article.run")).to_have_count(0)
    await expect(page.locator("#welcome")).to_be_visible()

    await menu.click()
    await expect(drawer).to_be_in_viewport()
    await expect(menu).to_have_attribute("aria-expanded", "true")
    await expect(page.locator("#chat-search")).to_be_focused()
    await expect(page.locator("#main")).to_have_js_property("inert", True)
    await snap("drawer-open")
    await page.keyboard.press("Escape")  # closes the drawer
    await expect(drawer).not_to_be_in_viewport()
    await expect(menu).to_be_focused()

    await menu.click()
    await page.locator(".session", has_text="First chat on the phone").click()
    await expect(drawer).not_to_be_in_viewport()  # choosing a chat closes it
    await expect(page.locator("article.run .bubble.user")).to_have_text("First chat on the phone")
    await expect(page.locator("article.run .answer")).to_be_visible()
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 390

    await menu.click()
    await page.mouse.click(370, 400)  # the scrim beside the drawer
    await expect(drawer).not_to_be_in_viewport()
    await snap("phone-chat")


async def test_the_desktop_has_no_drawer(ui_server: Any, page: Any) -> None:
    await open_page(page, ui_server.url)  # the default page is 1280×800
    await expect(page.locator("#menu")).to_be_hidden()
    await expect(page.locator("#new-chat-top")).to_be_hidden()
    await expect(page.locator("#drawer")).to_be_in_viewport()
    await expect(page.locator("#chat-search")).to_be_visible()
