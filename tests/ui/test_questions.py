"""Answering the agent's question: the one message box answers it, Esc there never stops the
run, and every tab watching the session sees the answer (issue 12, items 9 and 11)."""

from __future__ import annotations

import re
import time
from typing import Any

from tests.fakes.page_socket import PageSocket
from tests.ui.conftest import VIEWPORTS
from tests.ui.helpers import expect, open_page, send, start_run

QUESTION = ("Which city should I use for the weather report? " * 8).strip()


async def test_the_message_box_answers_and_other_tabs_see_the_answer(
    ui_server: Any, page: Any, browser: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await send(page, "What is the weather?")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_user_message", content="What is the weather?", agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1)
    pending = {
        "question": QUESTION,
        "tool_call_id": "q1",
        "step": 1,
        "expires_at": int(time.time() * 1000) + 300_000,
    }
    fake.emit("agent_request_input", **pending)

    banner = page.locator("#ask")
    await expect(banner).to_be_visible()
    await expect(page.locator("#ask-textarea, #ask-answer")).to_have_count(0)  # one composer
    await expect(page.locator("#message")).to_be_focused()
    await expect(page.locator("#send")).to_have_text("Answer")
    await expect(page.locator("#message")).to_have_attribute("placeholder", re.compile("Answer"))
    # the banner stays a few lines tall, even for a long question on a phone
    height = VIEWPORTS[viewport]["height"]
    box = await banner.bounding_box()
    assert box["height"] < height * 0.25, (box, height)
    await expect(page.locator("#message")).to_be_in_viewport()
    await snap("question")

    # a second tab on the same session
    context = await browser.new_context(viewport=VIEWPORTS[viewport])
    other = await context.new_page()
    fake.session.update(status="awaiting_input", pending_input=pending)
    await fake.install(other)
    await open_page(other, ui_server.url)
    await expect(other.locator("#ask-question")).to_have_text(QUESTION)

    await page.locator("#message").fill("Paris")
    await page.locator("#message").press("Escape")  # Esc in the answer box: no stop
    await expect(banner).to_be_visible()
    await page.locator("#message").press("Enter")
    answer = await fake.wait_sent(lambda f: f["type"] == "agent_user_input")
    assert answer["content"] == "Paris"
    assert not [f for f in fake.sent if f["type"] == "agent_control"]
    await expect(banner).to_be_hidden()
    await expect(page.locator("#send")).to_have_text("Stop")

    fake.emit("agent_user_answer", step=1, tool_call_id="q1", content="Paris")
    await expect(other.locator("#ask")).to_be_hidden()
    await expect(other.locator(".note.answer")).to_have_text("You answered: Paris")
    await expect(page.locator(".note.answer")).to_have_text("You answered: Paris")  # once
    await expect(other.locator("#send")).to_have_text("Stop")
    await context.close()
    await snap("question-answered")


async def test_a_run_waiting_for_an_answer_can_be_stopped_without_a_keyboard(
    ui_server: Any, page: Any, viewport: str
) -> None:
    # While a question is open the button says Answer and Esc in the box is no stop: a phone
    # user had no way to stop but to wait for the timeout.
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Book a table")
    expires = int(time.time() * 1000) + 300_000
    fake.emit(
        "agent_request_input",
        question="For how many?",
        tool_call_id="q1",
        step=1,
        expires_at=expires,
    )
    await expect(page.locator("#ask")).to_be_visible()
    await page.locator("#send").click()  # Answer with nothing typed: say what to do
    await expect(page.locator("#composer-note")).to_have_text(re.compile("Type your answer"))
    await page.locator("#ask-stop").click()
    stop = await fake.wait_sent(lambda f: f["type"] == "agent_control")
    assert stop["action"] == "stop"
    assert not [f for f in fake.sent if f["type"] == "agent_user_input"]
