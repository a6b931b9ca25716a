"""What a reader of a finished or running chat meets (issue 46, items 3, 4, 6, 7, 9, 10):
Continue extends the turn without a message nobody wrote, Copy answer gives the Markdown,
the end of a run leaves open what the reader opened and the view where it was, a stray Esc
stops nothing, phone controls fit the screen and a finger, and no internal text shows."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.page_socket import PageSocket
from tests.ui.helpers import (
    allow_clipboard,
    clipboard,
    expect,
    open_chats,
    open_page,
    start_run,
)

CONTINUE_TEXT = "Please continue the task from where you stopped."
ANSWER = """Run this yourself:

```python
from datetime import datetime
print(datetime.now())
```

| city | offset |
| --- | --- |
| Tokyo | +09:00 |
"""


async def opened_tool_card(page: Any, fake: PageSocket, result: str) -> Any:
    """A finished call of step 1, its card opened by the reader; return the card."""
    fake.emit("tool_start", step=1, tool_call_id="c1", tool_name="lookup", arguments={})
    fake.emit(
        "tool_complete", step=1, tool_call_id="c1", tool_name="lookup", result=result, duration_ms=5
    )
    card = page.locator("details.tool")
    await card.locator("summary").click()
    return card


async def test_continue_extends_the_turn_without_a_user_bubble(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Plan a trip", max_steps=1)
    fake.emit("agent_reason", step=1, content="Day one first.")
    fake.emit(
        "agent_completion",
        steps=1,
        final_answer="Day one: the castle.",
        stop_reason="max_steps",
        usage={},
    )
    fake.emit("response_complete")
    await page.get_by_role("button", name="Continue").click()
    await fake.wait_sent(lambda f: f.get("action") == "continue")

    fake.new_run()
    fake.emit("agent_user_message", content=CONTINUE_TEXT, agent_mode=True, origin="continue")
    fake.emit("agent_start", max_steps=1)
    fake.emit("agent_turn_start", step=1)
    fake.emit("agent_reason", step=1, content="Now day two.")
    fake.emit(
        "agent_completion",
        steps=1,
        final_answer="Day two: the river.",
        stop_reason="finished",
        usage={},
    )
    fake.emit("response_complete")

    runs = page.locator("article.run")
    await expect(runs).to_have_count(2)
    await expect(runs.nth(1)).to_have_class(re.compile(r"\bcontinued\b"))
    await expect(page.locator(".bubble.user")).to_have_count(1)
    await expect(page.locator("#conversation")).not_to_contain_text(CONTINUE_TEXT)
    await snap("continued")
    await page.get_by_role("button", name="Edit message").click()
    await expect(page.locator("#message")).to_have_value("Plan a trip")  # what the user wrote


async def test_copy_answer_copies_the_markdown_source(
    ui_server: Any, page: Any, viewport: str
) -> None:
    await allow_clipboard(page, ui_server.url)
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "What time is it in Tokyo?")
    fake.emit("agent_answer_delta", step=1, delta=ANSWER)
    fake.emit("agent_completion", steps=1, final_answer=ANSWER, stop_reason="finished", usage={})
    fake.emit("response_complete")
    await expect(page.locator(".answer table")).to_be_visible()
    await page.get_by_role("button", name="Copy answer").click()
    await expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert await clipboard(page) == ANSWER


async def test_the_end_of_a_run_keeps_what_the_reader_opened(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Read the log")
    fake.emit("agent_reason", step=1, content="Reading it.")
    card = await opened_tool_card(page, fake, "3 failed jobs")
    await expect(card).to_have_attribute("open", "")
    fake.emit("agent_observe", step=1, content="Done.")
    fake.emit("agent_answer_delta", step=1, delta="Three jobs failed.")
    fake.emit(
        "agent_completion",
        steps=1,
        final_answer="Three jobs failed.",
        stop_reason="finished",
        usage={},
    )
    fake.emit("response_complete")
    await expect(page.locator("article.run")).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(page.locator("details.work")).to_have_attribute("open", "")
    await expect(card.locator("pre.result")).to_be_visible()
    await snap("fold-keeps-opened")


async def test_the_end_of_a_run_keeps_the_scroll_anchored(
    ui_server: Any, page: Any, viewport: str
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Write a long report")
    long_reason = "\n".join(f"Thought {i}: more to consider." for i in range(40))
    fake.emit("agent_reason", step=1, content=long_reason)
    report = "\n\n".join(f"Paragraph {i} of the report." for i in range(40))
    fake.emit("agent_answer_delta", step=1, delta=report)
    fake.emit("agent_completion", steps=1, final_answer=report, stop_reason="finished", usage={})
    paragraph = page.locator(".answer p", has_text="Paragraph 20 of")
    await expect(paragraph).to_be_visible()
    conversation = page.locator("#conversation")
    # read the middle of the answer, away from the end
    await paragraph.evaluate("p => p.scrollIntoView({block: 'start'})")
    await conversation.evaluate("c => c.scrollBy(0, -4)")
    await expect(page.locator("#jump")).to_be_visible()
    before = (await paragraph.bounding_box())["y"]
    fake.emit("response_complete")  # folds the 40 lines of thought above it
    await expect(page.locator("details.work")).not_to_have_attribute("open", "")
    after = (await paragraph.bounding_box())["y"]
    assert abs(after - before) <= 2, (before, after)


async def test_the_end_of_a_run_leaves_the_steps_being_read_in_place(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Think it through")
    fake.emit("agent_reason", step=1, content="\n".join(f"Thought {i}." for i in range(60)))
    fake.emit("agent_answer_delta", step=1, delta="The answer.")
    fake.emit(
        "agent_completion", steps=1, final_answer="The answer.", stop_reason="finished", usage={}
    )
    await expect(page.locator(".answer")).to_have_text("The answer.")
    conversation = page.locator("#conversation")
    await conversation.evaluate("c => c.scrollTo(0, 150)")  # reading the thoughts
    await expect(page.locator("#jump")).to_be_visible()
    fake.emit("response_complete")
    await expect(page.locator("article.run")).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(page.locator("details.work")).to_have_attribute("open", "")
    assert await conversation.evaluate("c => c.scrollTop") == 150
    await snap("fold-keeps-reading")


async def test_esc_stops_a_run_only_from_the_composer(
    ui_server: Any, page: Any, viewport: str
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Count slowly")
    await open_chats(page, viewport)
    search = page.locator("#chat-search")
    await search.fill("trip")
    await search.press("Escape")  # clears the search
    await search.press("Escape")  # nothing left to clear: still no stop
    await expect(page.locator("#send")).to_have_text("Stop")  # not "Stopping…"
    if viewport == "phone" and await page.locator("body.drawer-open").count():
        await page.locator("#menu").click()
    await page.locator("#message").press("Escape")
    await fake.wait_sent(lambda f: f.get("action") == "stop")
    stops = [f for f in fake.sent if f.get("action") == "stop"]
    assert len(stops) == 1, fake.sent


async def test_phone_controls_fit_the_screen_and_a_finger(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Delete the old files")
    fake.emit(
        "tool_start",
        step=1,
        tool_call_id="c1",
        tool_name="delete_files",
        arguments={"path": "/tmp/old"},
    )
    fake.emit(
        "agent_tool_approval",
        step=1,
        tool_call_id="c1",
        tool_name="delete_files",
        arguments={"path": "/tmp/old"},
        expires_at=fake.clock + 300_000,
    )
    deny = page.locator("#approve-no")
    await expect(deny).to_be_visible()
    width = page.viewport_size["width"]
    box = await deny.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
    assert await page.evaluate("document.documentElement.scrollWidth") <= width
    approve = await page.locator("#approve-yes").bounding_box()
    if viewport == "phone":  # stacked, full width, one under the other
        assert box["y"] > approve["y"] and abs(box["width"] - approve["width"]) < 1
        toggle = await page.locator("#tools-panel summary").bounding_box()
        assert toggle["height"] >= 44, toggle
    else:
        assert abs(box["y"] - approve["y"]) < 1  # side by side
    await snap("approval")


async def test_jump_to_latest_never_covers_copy_result(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Show the numbers")
    fake.emit("agent_reason", step=1, content="\n".join(f"Thought {i}." for i in range(40)))
    card = await opened_tool_card(page, fake, "1, 2, 3")
    fake.emit(
        "agent_answer_delta",
        step=1,
        delta="\n\n".join(f"Line {i} of a long answer." for i in range(60)),
    )
    await expect(page.locator(".answer p").last).to_have_text("Line 59 of a long answer.")
    copy = card.get_by_role("button", name="Copy result")
    # the long answer streamed in one piece, and the view followed it to the end
    conversation = page.locator("#conversation")
    assert await conversation.evaluate("c => c.scrollTop > 0")
    await copy.evaluate("b => b.scrollIntoView({block: 'end'})")  # at the bottom edge
    jump = page.locator("#jump")
    await expect(jump).to_be_visible()
    a, b = await copy.bounding_box(), await jump.bounding_box()
    apart = (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )
    assert apart, (a, b)
    await snap("jump-and-copy")


async def test_no_internal_text_and_the_controls_explain_themselves(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await expect(page.locator("#sign-out")).to_be_hidden()  # no auth: nobody to sign out
    placeholder = await page.locator("#message").get_attribute("placeholder")
    if viewport == "phone":
        assert "Esc" not in placeholder and "Shift" not in placeholder, placeholder
    else:
        assert "Esc to stop" in placeholder
    await expect(page.locator("#controls-hint")).to_contain_text("max steps")
    assert "steps" in (await page.locator("label.steps").get_attribute("title") or "")
    assert "tools" in (await page.locator("label.toggle").get_attribute("title") or "")
    await start_run(page, fake, "Quick one")
    fake.emit(
        "agent_verify",
        step=1,
        done=True,
        reason="The check could not be read, so the answer stands.",
    )
    fake.emit("agent_answer_delta", step=1, delta="Done.")
    fake.emit("agent_completion", steps=1, final_answer="Done.", stop_reason="finished", usage={})
    fake.emit("response_complete")
    conversation = page.locator("#conversation")
    await expect(conversation.locator(".answer")).to_have_text("Done.")
    await expect(conversation).not_to_contain_text("Checked:")
    await expect(conversation).not_to_contain_text("Agent run · up to")
    await snap("plain-run")
