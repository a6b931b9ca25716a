"""The tools panel and the approval banner (server/static/tools.js) in a real Chromium."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.ui.conftest import CHROMIUM, Snap

pw = pytest.importorskip(
    "playwright.async_api",
    reason="the playwright package is missing (scripts/test-deps.sh installs it into .venv)",
)
if CHROMIUM is None:
    pytest.skip(
        "Debian's chromium-headless-shell is missing (scripts/test-deps.sh installs it)",
        allow_module_level=True,
    )

from tests.fakes.openai_server import FakeLLM, FakeToolCall, act, observe  # noqa: E402

expect = pw.expect
expect.set_options(timeout=10_000)


async def test_pick_tools_then_approve_and_deny_calls(
    ui_server_factory, page: Any, fake_llm: FakeLLM, snap: Snap
):
    first = FakeToolCall("get_current_time", {"timezone": "UTC"})
    second = FakeToolCall("get_current_time", {"timezone": "Asia/Tokyo"})
    fake_llm.script("act", act(first), act(second))
    fake_llm.script("observe", observe("Got UTC."), observe("Declined.", final="Only UTC, then."))
    sent: list[dict[str, Any]] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda p: sent.append(json.loads(p))))
    tools = {"enabled": ["get_current_time", "web_fetch"], "approval": ["get_current_time"]}
    async with ui_server_factory(tools=tools) as server:
        await page.goto(server.url)
        await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
        panel = page.locator("#tools-panel")
        await expect(panel.locator("summary")).to_have_text("Tools (2/2)")
        await panel.locator("summary").click()
        await expect(panel.locator(".tool-approval")).to_have_count(1)
        await panel.locator('input[data-tool="web_fetch"]').uncheck()
        await expect(panel.locator("summary")).to_have_text("Tools (1/2)")

        await page.locator("#message").fill("What time is it?")
        await page.locator("#message").press("Enter")
        banner = page.locator("#approve")
        await expect(banner).to_be_visible()
        await expect(page.locator("#approve-call")).to_have_text("get_current_time")
        await expect(page.locator("#approve-args")).to_contain_text('"UTC"')
        await snap("tool-approval")
        await page.locator("#approve-yes").click()
        # The next call's banner may follow at once: wait for its arguments, not a gap.
        await expect(page.locator("#approve-args")).to_contain_text("Asia/Tokyo")
        await expect(banner).to_be_visible()
        await page.locator("#approve-reason").fill("UTC is enough")
        await page.locator("#approve-no").click()
        await expect(page.locator("#conversation")).to_contain_text("Only UTC, then.")
        await expect(banner).to_be_hidden()

    chat = next(f for f in sent if f["type"] == "chat")
    assert chat["tools"] == ["get_current_time"]
    decisions = [f for f in sent if f["type"] == "agent_tool_decision"]
    assert decisions == [
        {"type": "agent_tool_decision", "tool_call_id": first.id, "approve": True},
        {
            "type": "agent_tool_decision",
            "tool_call_id": second.id,
            "approve": False,
            "reason": "UTC is enough",
        },
    ]
    act_request = next(r for r in fake_llm.requests if r.phase == "act")
    assert [t["function"]["name"] for t in act_request.body["tools"]] == [
        "get_current_time",
        "request_input",
    ]


async def test_an_approval_banner_never_takes_a_keystroke_meant_elsewhere(
    ui_server_factory, page: Any, fake_llm: FakeLLM
):
    # The banner used to move the focus onto Approve: a space typed for the message box ran
    # the call. Someone typing keeps the focus; the banner asks for a deliberate choice.
    fake_llm.script("act", act(FakeToolCall("get_current_time", {"timezone": "UTC"})))
    fake_llm.script("observe", observe("Denied.", final="No time, then."))
    sent: list[dict[str, Any]] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda p: sent.append(json.loads(p))))
    tools = {"enabled": ["get_current_time"], "approval": ["get_current_time"]}
    async with ui_server_factory(tools=tools) as server:
        await page.goto(server.url)
        await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
        box = page.locator("#message")
        await box.fill("What time is it?")
        await box.press("Enter")
        await expect(page.locator("#approve")).to_be_visible()
        await expect(box).to_be_focused()
        # Not "running": the call waits, and so does its step.
        card = page.locator("article.run details.tool")
        await expect(card.locator(".tool-status")).to_have_text("waiting for your approval")
        await expect(page.locator("article.run .phase")).to_have_text("Waiting for your approval")
        await page.keyboard.type("and then ")
        await expect(box).to_have_value("and then ")
        await page.locator("#approve-no").click()
        await expect(page.locator("#conversation")).to_contain_text("No time, then.")
        # the user's choice, not a failure: no red error (issue 46, item 10)
        await expect(card).to_have_class("tool declined")
        await expect(card.locator(".tool-status")).to_have_text("declined by you")
    decisions = [f for f in sent if f["type"] == "agent_tool_decision"]
    assert [d["approve"] for d in decisions] == [False]
