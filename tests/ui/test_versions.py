"""Versions of a turn in the page (issue 46, item 2): Edit on any message and Regenerate on
any answer make a new version of that turn; ‹ 1/2 › switches it; the model reads only the
versions shown; a reload shows the same versions. Against the real server and store, with
a scripted model, at both sizes (screenshots as artifacts)."""

from __future__ import annotations

from typing import Any

from tests.fakes.openai_server import FakeLLM, text
from tests.ui.helpers import expect, open_page, send


def shown(page: Any) -> Any:
    return page.locator("article.run:not([hidden])")


async def ask(page: Any, message: str, answer: str) -> None:
    await send(page, message)
    await expect(shown(page).last.locator(".answer")).to_have_text(answer)
    await expect(page.locator("#send")).to_have_text("Send")


def said(fake_llm: FakeLLM) -> list[str]:
    """What the model read in the last chat call, the system message left out."""
    chats = [r for r in fake_llm.requests if r.phase == "chat"]
    return [m["content"] for m in chats[-1].body["messages"][1:]]


async def test_edit_regenerate_and_switch_versions_of_any_turn(
    ui_server: Any, page: Any, viewport: str, snap: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script("chat", text("Paris."), text("Rome."), text("Madrid."), text("Paris, again."))
    await open_page(page, ui_server.url)
    await page.locator("#agent-mode").uncheck()
    await ask(page, "Capital of France?", "Paris.")
    await ask(page, "Capital of Italy?", "Rome.")
    first, second = shown(page).nth(0), shown(page).nth(1)
    await expect(first.locator(".version-count")).to_have_count(0)  # one version so far

    # Edit the second message in place: a new version of its turn.
    await second.get_by_role("button", name="Edit this message").click()
    box = second.get_by_role("textbox", name="Edit your message")
    await expect(box).to_have_value("Capital of Italy?")
    await box.fill("Capital of Spain?")
    await box.press("Enter")
    await expect(shown(page)).to_have_count(2)
    edited = shown(page).nth(1)
    await expect(edited.locator(".answer")).to_have_text("Madrid.")
    await expect(edited.locator(".version-count")).to_have_text("2/2")
    await expect(page.locator(".answer", has_text="Rome.")).to_be_hidden()
    assert said(fake_llm) == ["Capital of France?", "Paris.", "Capital of Spain?"]
    await snap("versions-edited")

    # ‹ shows the first version again, with its own answer.
    await edited.get_by_role("button", name="Previous version").click()
    await expect(shown(page).nth(1).locator(".version-count")).to_have_text("1/2")
    await expect(shown(page).nth(1).locator(".answer")).to_have_text("Rome.")
    await expect(page.locator(".answer", has_text="Madrid.")).to_be_hidden()
    await snap("versions-switched")

    # Regenerate the first answer (not the last one): only the new first turn stays in view.
    await shown(page).nth(0).get_by_role("button", name="Regenerate this answer").click()
    await expect(shown(page)).to_have_count(1)
    await expect(shown(page).nth(0).locator(".answer")).to_have_text("Paris, again.")
    await expect(shown(page).nth(0).locator(".version-count")).to_have_text("2/2")
    assert said(fake_llm) == ["Capital of France?"]
    await snap("versions-regenerated")

    # A reload shows the same versions; › on the first turn brings back what was below it.
    await page.reload()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
    await expect(shown(page)).to_have_count(1)
    await expect(shown(page).nth(0).locator(".answer")).to_have_text("Paris, again.")
    await shown(page).nth(0).get_by_role("button", name="Previous version").click()
    await expect(shown(page)).to_have_count(2)
    await expect(shown(page).nth(1).locator(".answer")).to_have_text("Rome.")
    await expect(shown(page).nth(1).locator(".version-count")).to_have_text("1/2")
    # on a phone nothing is wider than the screen
    width = await page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"]


async def test_an_edit_can_be_cancelled_and_changes_nothing(
    ui_server: Any, page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script("chat", text("Paris."))
    await open_page(page, ui_server.url)
    await page.locator("#agent-mode").uncheck()
    await ask(page, "Capital of France?", "Paris.")
    run = shown(page).nth(0)
    await run.get_by_role("button", name="Edit this message").click()
    await run.get_by_role("textbox", name="Edit your message").fill("something else")
    await run.get_by_role("textbox", name="Edit your message").press("Escape")
    await expect(run.locator(".bubble.user")).to_have_text("Capital of France?")
    await expect(run.get_by_role("textbox")).to_have_count(0)
    await expect(page.locator("#send")).to_have_text("Send")  # Esc did not reach the composer
    assert len([r for r in fake_llm.requests if r.phase == "chat"]) == 1


async def test_retry_after_a_stop_is_a_new_version_of_the_turn(
    ui_server: Any, page: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script("chat", text("Slowly", " and more", hang_after=1), text("Done now."))
    await open_page(page, ui_server.url)
    await page.locator("#agent-mode").uncheck()
    await send(page, "Take your time")
    await expect(page.locator(".answer")).to_have_text("Slowly")
    await page.locator("#message").press("Escape")
    await expect(page.locator(".notice.warning")).to_have_text("Stopped by you.")
    await page.get_by_role("button", name="Retry").click()
    await expect(shown(page)).to_have_count(1)
    await expect(shown(page).locator(".answer")).to_have_text("Done now.")
    await expect(shown(page).locator(".version-count")).to_have_text("2/2")
    await expect(page.locator(".notice.warning")).to_be_hidden()  # the stopped version
    assert said(fake_llm) == ["Take your time"]  # not the stopped turn, not twice
