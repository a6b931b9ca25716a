"""Refresh the web UI screenshots in docs/ (docs/screenshot.png and docs/ui/*.png).

    .venv/bin/python scripts/ui_screenshots.py      (or: make screenshots)
    .venv/bin/python scripts/ui_screenshots.py versions      (only the states named)

Runs the real server over a temporary SQLite file with the scripted fake LLM, and Debian's
Chromium through Playwright (scripts/test-deps.sh installs both). States the server cannot
reach yet (protocol additions still being built) are driven by the tests' scripted page
socket. Not part of `make test`: the tests keep their screenshots in pytest's temp folder.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.async_api import async_playwright, expect  # noqa: E402

from server.app import create_app  # noqa: E402
from server.settings import load_settings  # noqa: E402
from tests.fakes.openai_server import (  # noqa: E402
    FakeLLM,
    FakeToolCall,
    Reply,
    act,
    observe,
    reason,
)
from tests.fakes.page_socket import PageSocket  # noqa: E402
from tests.fakes.servers import bind_loopback, run_server, serve  # noqa: E402
from tests.ui.conftest import CHROMIUM  # noqa: E402

DOCS = ROOT / "docs"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


def clock_answer(body: dict[str, Any]) -> Any:
    result = next(m for m in body["messages"] if m["role"] == "tool")
    now = json.loads(result["content"])
    final = (f"It is **{now['time'][:5]}** in UTC.\n\n- date: `{now['date']}`\n"
             f"- weekday: {now['weekday']}")
    return observe("That answers the question.", final=final)


async def new_page(browser: Any, size: dict[str, int]) -> Any:
    phone = size == PHONE
    context = await browser.new_context(viewport=size, is_mobile=phone, has_touch=phone,
                                        color_scheme="light")
    context.set_default_timeout(10_000)
    return await context.new_page()


async def open_page(page: Any, url: str) -> None:
    await page.goto(url)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")


async def send(page: Any, text: str) -> None:
    await page.locator("#message").fill(text)
    await page.locator("#message").press("Enter")


async def shoot(page: Any, name: str) -> None:
    await page.locator("#message").blur()
    path = DOCS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(path))
    print(f"wrote {path.relative_to(ROOT)}")


async def finished_run(browser: Any, url: str, fake_llm: FakeLLM) -> None:
    fake_llm.script("reason", reason("Let me check the clock in UTC."),
                    reason("I have the time now.", finish=True))
    fake_llm.script("act", act(FakeToolCall("get_current_time", {"timezone": "UTC"})))
    fake_llm.script("observe", observe("The tool returned the current UTC time."), clock_answer)
    fake_llm.script("title", Reply(chunks=["Time in UTC"]))
    page = await new_page(browser, DESKTOP)
    await open_page(page, url)
    await send(page, "What time is it in UTC?")
    await expect(page.locator("article.run.complete")).to_have_count(1)
    await shoot(page, "screenshot.png")
    await page.locator(".work-summary").click()
    await page.locator("details.tool summary").click()
    await shoot(page, "ui/run-expanded.png")
    await page.context.close()


async def phone_states(browser: Any, url: str, fake_llm: FakeLLM) -> None:
    fake_llm.script(
        "title", Reply(chunks=["Three days in Lisbon"]), Reply(chunks=["Sourdough starters"])
    )
    page = await new_page(browser, PHONE)
    for text in ("Plan a three-day trip to Lisbon", "Explain sourdough starters"):
        await open_page(page, url)
        await send(page, text)
        await expect(page.locator("article.run.complete")).to_have_count(1)
        await page.locator("#new-chat-top").click()
    await page.locator("#menu").click()
    await expect(page.locator(".session-item")).to_have_count(3)
    await expect(page.locator(".session-title").first).to_have_text("Sourdough starters")
    await expect(page.locator("#drawer")).to_have_css("transform", "none")  # slid in
    await page.locator("#chat-search").blur()
    await page.screenshot(path=str(DOCS / "ui" / "drawer-phone.png"))
    print("wrote docs/ui/drawer-phone.png")
    await page.locator("#chat-search").fill("trip")  # said in a chat, not in its title
    await expect(page.locator(".session-match mark")).to_have_text("trip")
    await page.locator("#chat-search").blur()
    await page.screenshot(path=str(DOCS / "ui" / "search-phone.png"))
    print("wrote docs/ui/search-phone.png")
    await page.context.close()

    page = await new_page(browser, PHONE)
    fake = await PageSocket().install(page)
    await open_page(page, url)
    await send(page, "Delete the old build folders")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_user_message", content="Delete the old build folders", agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1)
    fake.emit("agent_reason", step=1, content="I will remove the folders under build/.")
    call = {"step": 1, "tool_call_id": "c1", "tool_name": "delete_files",
            "arguments": {"path": "build/", "older_than_days": 30}}
    fake.emit("tool_start", **call)
    fake.emit("agent_tool_approval", **call, expires_at=int(time.time() * 1000) + 290_000)
    await expect(page.locator("#approve")).to_be_visible()
    await page.locator("#message").blur()
    await page.screenshot(path=str(DOCS / "ui" / "approval-phone.png"))
    print("wrote docs/ui/approval-phone.png")
    await page.context.close()

    page = await new_page(browser, PHONE)
    fake = await PageSocket().install(page)
    await open_page(page, url)
    await send(page, "What is the weather where I am?")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_user_message", content="What is the weather where I am?", agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1)
    fake.emit("agent_reason", step=1, content="I need to know the city first.")
    fake.emit("agent_request_input", step=1, tool_call_id="q1",
              question="Which city should I use for the weather report?",
              expires_at=int(time.time() * 1000) + 290_000)
    await expect(page.locator("#ask")).to_be_visible()
    await page.locator("#message").fill("Lisbon")
    await page.screenshot(path=str(DOCS / "ui" / "question-phone.png"))
    print("wrote docs/ui/question-phone.png")
    await page.context.close()


async def live_run(browser: Any, url: str) -> None:
    """A run at work: the phase's timer and what the model has written so far."""
    page = await new_page(browser, DESKTOP)
    fake = await PageSocket().install(page)
    await open_page(page, url)
    await send(page, "Which of our services had errors last night?")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_user_message", content="Which of our services had errors last night?",
              agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1, after_ms=-40_000)
    fake.emit("agent_reason", step=1, content="I will read the error log of each service.")
    fake.emit("tool_start", step=1, tool_call_id="c1", tool_name="read_log",
              arguments={"service": "billing", "since": "yesterday 18:00"})
    fake.emit("tool_complete", step=1, tool_call_id="c1", tool_name="read_log",
              result={"errors": 3}, duration_ms=840)
    fake.emit("agent_observe", step=1, content="Billing logged 3 errors.")
    fake.emit("agent_turn_start", step=2, after_ms=-12_000)
    for piece in ["Billing had ", "three errors. ", "Next I should ", "check the ", "mail queue"]:
        fake.emit("agent_reason_delta", step=2, delta=piece)
    await expect(page.locator(".step[data-step='2'] .phase")).to_contain_text("5 tokens")
    await shoot(page, "ui/live-run.png")
    await page.context.close()


async def desktop_states(browser: Any, url: str) -> None:
    page = await new_page(browser, DESKTOP)
    fake = await PageSocket(model="gpt-4o-mini").install(page)
    await open_page(page, url)
    await expect(page.locator("#welcome-model")).to_be_visible()
    await shoot(page, "ui/welcome.png")
    await send(page, "Check the weather in Lisbon")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_user_message", content="Check the weather in Lisbon", agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1)
    fake.emit("error", code="llm_error",
              message="The language model answered with an error (HTTP 503).", after_ms=3000)
    fake.emit("response_complete")
    await expect(page.get_by_role("button", name="Retry")).to_be_visible()
    await page.get_by_role("button", name="Retry").click()
    await fake.wait_sent(lambda f: f.get("action") == "retry")
    fake.new_run()
    fake.emit("agent_user_message", content="Check the weather in Lisbon", agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1)
    fake.emit("agent_llm_retry", step=1, phase="reason", attempt=2, max_attempts=3,
              reason="HTTP 503", delay_ms=800)
    await expect(page.locator(".retrying")).to_be_visible()
    await shoot(page, "ui/retry.png")
    fake.accepting = False
    await fake.drop()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "reconnecting")
    await send(page, "Also: will it rain tomorrow?")
    await expect(page.locator("article.run.queued")).to_be_visible()
    await shoot(page, "ui/disconnected.png")
    await page.context.close()


async def versions(browser: Any, url: str, fake_llm: FakeLLM) -> None:
    """Versions of a turn: a message edited in place (phone), then 2/2 under it (both
    sizes)."""
    for size, name in ((DESKTOP, "ui/versions.png"), (PHONE, "ui/versions-phone.png")):
        fake_llm.script(
            "chat",
            Reply(chunks=["Lisbon has about **545,000** people in the city itself."]),
            Reply(chunks=["Porto has about 232,000 people."]),
            Reply(chunks=["Coimbra has about 140,000 people."]),
        )
        fake_llm.script("title", Reply(chunks=["People in Portuguese cities"]))
        page = await new_page(browser, size)
        await open_page(page, url)
        await page.locator("#agent-mode").uncheck()
        await send(page, "How many people live in Lisbon?")
        await expect(page.locator(".answer")).to_have_count(1)
        await expect(page.locator("#send")).to_have_text("Send")
        await send(page, "And in Porto?")
        await expect(page.locator(".answer")).to_have_count(2)
        await expect(page.locator("#send")).to_have_text("Send")
        second = page.locator("article.run").nth(1)
        await second.get_by_role("button", name="Edit this message").click()
        box = second.get_by_role("textbox", name="Edit your message")
        await box.fill("And in Coimbra?")
        if size == PHONE:  # the message edited in place
            await page.screenshot(path=str(DOCS / "ui" / "versions-editing-phone.png"))
            print("wrote docs/ui/versions-editing-phone.png")
        await box.press("Enter")
        await expect(page.locator("article.run:not([hidden]) .version-count")).to_have_text("2/2")
        await expect(page.locator("#send")).to_have_text("Send")
        await page.mouse.move(0, 0)
        await shoot(page, name)
        await page.context.close()


STATES = {  # name: (function, whether it takes the fake LLM)
    "finished": (finished_run, True),
    "phone": (phone_states, True),
    "live": (live_run, False),
    "desktop": (desktop_states, False),
    "versions": (versions, True),
}


async def main(names: list[str]) -> None:
    fake_llm = FakeLLM()
    with tempfile.TemporaryDirectory() as tmp:
        async with serve(fake_llm.app) as llm:
            sock = bind_loopback()
            address = f"127.0.0.1:{sock.getsockname()[1]}"
            settings = load_settings(None, {
                "llm": {"base_url": f"http://{llm}/v1", "max_retries": 0, "model": "gpt-4o-mini"},
                "storage": {"sqlite_path": str(Path(tmp) / "ui.db")},
                "agent": {"session_titles": True},
                "server": {"allowed_origins": [f"http://{address}"]},
            })
            async with run_server(create_app(settings), sock=sock), async_playwright() as p:
                assert CHROMIUM is not None, "scripts/test-deps.sh installs a Chromium"
                browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                url = f"http://{address}/"
                try:
                    for name in names or list(STATES):
                        state, scripted = STATES[name]
                        await (state(browser, url, fake_llm) if scripted else state(browser, url))
                finally:
                    await browser.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
