"""A run never looks frozen (issue 46, item 1): every phase shows a live timer, the text each
phase streams shows as it arrives in a quiet style with a count of what came, and the answer
grows from its first piece. Scripted with the page's fake socket, so each state is exact."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.page_socket import PageSocket
from tests.ui.helpers import expect, open_page, send

TIMER = r"\d+ s"


async def test_every_phase_shows_a_live_timer_and_what_the_model_writes(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await send(page, "How warm is Lisbon?")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_user_message", content="How warm is Lisbon?", agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1, after_ms=-12_000)  # the phase began 12 s ago

    run = page.locator("article.run")
    label = run.locator(".step .phase")
    # the phase's age comes from its event, so a page opened late still tells the truth
    await expect(label).to_have_text(re.compile(r"^Thinking · 1\d s$"))
    first = await label.inner_text()
    await expect(label).not_to_have_text(first)  # it ticks with no event arriving

    for piece in ["I should ", "look up ", "the weather."]:
        fake.emit("agent_reason_delta", step=1, delta=piece)
    reason = run.locator(".step .reason")
    await expect(reason).to_have_text("I should look up the weather.")
    await expect(label).to_have_text(re.compile(rf"^Thinking · {TIMER} · 3 tokens$"))
    quiet = await reason.evaluate("n => getComputedStyle(n).fontSize")
    assert quiet == "14px", quiet  # a draft, quieter than the text it becomes
    await snap("live-thinking")

    fake.emit("agent_reason", step=1, content="I should look up the weather.")
    await expect(label).to_have_text(re.compile(rf"^Acting · {TIMER}$"))
    assert await reason.evaluate("n => getComputedStyle(n).fontSize") != "14px"
    acting = await label.inner_text()
    await expect(label).not_to_have_text(acting)  # Act sends nothing while the model writes
    await snap("live-acting")

    fake.emit("tool_start", step=1, tool_call_id="c1", tool_name="weather", arguments={})
    fake.emit(
        "tool_complete",
        step=1,
        tool_call_id="c1",
        tool_name="weather",
        result="21 °C",
        duration_ms=40,
    )
    fake.emit("agent_observe_delta", step=1, delta="It is 21 °C.")
    await expect(label).to_have_text(re.compile(rf"^Observing · {TIMER} · 1 token$"))
    await expect(run.locator(".step .observe")).to_have_text("It is 21 °C.")

    fake.emit("agent_answer_delta", step=1, delta="Lisbon is ")
    answer = run.locator(".answer")
    await expect(answer).to_have_text("Lisbon is ")  # from its first piece
    fake.emit("agent_answer_delta", step=1, delta="**21 °C** now.")
    await expect(answer.locator("strong")).to_have_text("21 °C")
    await snap("live-answer")

    fake.emit("agent_observe", step=1, content="It is 21 °C.")
    fake.emit(
        "agent_completion",
        steps=1,
        final_answer="Lisbon is **21 °C** now.",
        stop_reason="finished",
        usage={},
    )
    fake.emit("response_complete")
    await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(run.locator(".run-body")).not_to_have_attribute("data-elapsed", re.compile("."))


async def test_a_chat_run_shows_its_timer_until_the_answer_streams(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await page.locator("#agent-mode").uncheck()
    await send(page, "Hello")
    await fake.wait_sent(lambda f: f["type"] == "chat" and f["agent_mode"] is False)
    body = page.locator("article.run .run-body")
    await expect(body).to_have_attribute("data-elapsed", re.compile(rf"^{TIMER}$"))
    waiting = await body.evaluate("n => getComputedStyle(n, '::after').content")
    assert "Working" in waiting, waiting
    await snap("live-chat-waiting")

    fake.new_run()
    fake.emit("agent_user_message", content="Hello", agent_mode=False)
    fake.emit("chat_delta", delta="Hi")
    await expect(page.locator("article.run .answer")).to_have_text("Hi")
    after = await body.evaluate("n => getComputedStyle(n, '::after').content")
    assert after == "none", after  # the streaming answer is the sign of life now
