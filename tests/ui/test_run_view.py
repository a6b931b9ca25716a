"""How a run reads: steps fold into one line when it ends, the answer stays in view, and tool
cards show their arguments, elapsed time and long results sensibly (issue 12, item 7)."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.openai_server import FakeLLM
from tests.fakes.page_socket import PageSocket
from tests.ui.helpers import allow_clipboard, clipboard, expect, open_page, send, start_run

LOG = "\n".join(f"2026-11-23 10:{i:02d}:00 worker-{i % 3} handled job {i}" for i in range(60))


async def test_a_finished_run_folds_its_steps_and_keeps_the_answer_in_view(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    await allow_clipboard(page, ui_server.url)
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await send(page, "Summarize the worker log")
    chat = await fake.wait_sent(lambda f: f["type"] == "chat")
    assert chat["content"] == "Summarize the worker log"

    fake.new_run()
    fake.emit("agent_user_message", content=chat["content"], agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1)
    fake.emit("agent_reason", step=1, content="I will read the log.")
    fake.emit(
        "tool_start",
        step=1,
        tool_call_id="c1",
        tool_name="read_file",
        arguments={"path": "/var/log/worker.log", "lines": 500},
        after_ms=-4000,
    )
    run = page.locator("article.run")
    card = run.locator("details.tool")
    await expect(card.locator(".tool-args")).to_have_text('path: "/var/log/worker.log", lines: 500')
    await expect(card.locator(".tool-status")).to_have_text(re.compile(r"^running \d+ s…$"))
    await snap("tool-running")

    fake.emit(
        "tool_complete",
        step=1,
        tool_call_id="c1",
        tool_name="read_file",
        result={"log": LOG, "lines": 60},
        duration_ms=1234,
        after_ms=5000,
    )
    fake.emit(
        "agent_context",
        step=1,
        phase="observe",
        tokens=9000,
        budget=8000,
        exact=False,
        compressed=[{"result_id": "c1", "tokens": 9500, "kept_tokens": 2000}],
        dropped_messages=0,
        collapsed_steps=0,
    )
    fake.emit("agent_observe", step=1, content="Three jobs failed.")
    fake.emit("agent_answer_delta", step=1, delta="The log shows ")
    answer = run.locator(".answer")
    await expect(answer).to_have_text("The log shows ")
    await expect(answer).to_have_attribute("aria-busy", "true")
    fake.emit("agent_answer_delta", step=1, delta="**3 failed jobs**.")
    fake.emit(
        "agent_completion",
        steps=1,
        final_answer="The log shows **3 failed jobs**.",
        stop_reason="finished",
        usage={"total_tokens": 1200},
        after_ms=10_200,
    )
    fake.emit("response_complete")

    await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(run.locator(".bubble.user")).to_have_count(1)  # the event did not repeat it
    work = run.locator("details.work")
    await expect(work.locator(".work-summary")).to_have_text("Worked for 12 s · 1 step · 1 tool")
    await expect(work).not_to_have_attribute("open", "")
    await expect(card).to_be_hidden()
    await expect(answer.locator("strong")).to_have_text("3 failed jobs")
    await expect(answer).not_to_have_attribute("aria-busy", "true")
    await expect(answer).to_be_in_viewport()
    await snap("run-folded")

    await work.locator(".work-summary").click()
    await card.locator("summary").click()
    await expect(card.locator(".tool-status")).to_have_text("✓ 1.2 s")
    result = card.locator("pre.result")
    await expect(result).to_have_class(re.compile(r"\bclamped\b"))
    clamped = (await result.bounding_box())["height"]
    assert clamped < 300, clamped
    text = await result.inner_text()
    assert "worker-1 handled job 1\n2026" in text and "\\n" not in text  # real line breaks
    await expect(card.locator(".tool-seen")).to_have_text(
        "The model saw about 2,000 of its 9,500 tokens; it can ask for the rest."
    )
    await card.get_by_role("button", name="Show more").click()
    await expect(result).not_to_have_class(re.compile(r"\bclamped\b"))
    assert (await result.bounding_box())["height"] > clamped * 2
    await expect(card.get_by_role("button", name="Show less")).to_be_visible()
    await card.get_by_role("button", name="Copy result").click()
    await expect(card.get_by_role("button", name="Copied")).to_be_visible()
    assert "worker-2 handled job 59" in await clipboard(page)
    await snap("tool-card-expanded")


async def test_a_run_with_no_answer_keeps_its_steps_open(
    ui_server: Any, page: Any, fake_llm: FakeLLM
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await send(page, "Go")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_start", max_steps=3)
    fake.emit("agent_turn_start", step=1)
    fake.emit("agent_reason", step=1, content="Working on it.")
    fake.emit("agent_stopped", step=1, reason="user")
    fake.emit("response_complete")

    run = page.locator("article.run")
    await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
    summary = run.locator(".work-summary")
    await expect(summary).to_have_text(re.compile(r"^Worked for \d+ s · 1 step$"))
    await expect(run.locator("details.work")).to_have_attribute("open", "")
    await expect(run.locator(".reason")).to_be_visible()


async def test_an_answer_cut_short_is_rendered_marked_and_keeps_the_steps_open(
    ui_server: Any, page: Any, fake_llm: FakeLLM
) -> None:
    # A stop in the middle of the answer left it as raw Markdown, `aria-busy` for good, and
    # folded the steps as if the run had finished.
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Write it up", max_steps=1)
    fake.emit("agent_reason", step=1, content="I know this.")
    fake.emit("agent_answer_delta", step=1, delta="# A long answer\n\nIt has **bold** ")
    fake.emit("agent_stopped", step=1, reason="user")
    fake.emit("response_complete")

    run = page.locator("article.run")
    await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(run.locator(".run-meta")).to_have_count(0)  # no "Agent run · up to 1 step"
    answer = run.locator(".answer")
    await expect(answer.locator("h3")).to_have_text("A long answer")  # demoted two levels
    await expect(answer.locator("strong")).to_have_text("bold")
    await expect(answer).not_to_have_attribute("aria-busy", "true")
    await expect(answer.locator(".answer-cut")).to_be_visible()
    await expect(run.locator("details.work")).to_have_attribute("open", "")


async def test_a_refused_message_leaves_the_last_runs_buttons(ui_server: Any, page: Any) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await send(page, "First")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    fake.emit("agent_user_message", content="First", agent_mode=False)
    fake.emit("chat_delta", delta="Done.")
    fake.emit("chat_response", content="Done.")
    fake.emit("response_complete")
    actions = page.locator("#conversation .run-actions")
    await expect(actions).to_be_visible()
    await send(page, "Second")
    await fake.wait_sent(lambda f: f["type"] == "chat" and f["content"] == "Second")
    fake.send({"type": "error", "code": "invalid_message", "message": "Too long."})
    await expect(page.locator("#composer-note")).to_be_visible()
    await expect(actions).to_be_visible()


async def test_the_answer_reads_as_markdown_while_it_streams(ui_server: Any, page: Any) -> None:
    # Raw `##` and table pipes until the end, then a jump: the answer is rendered as it grows.
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Compare them")
    fake.emit("agent_answer_delta", step=1, delta="## Compared\n\n| a | b |\n")
    fake.emit("agent_answer_delta", step=1, delta="| - | - |\n| 1 | 2 |\n\nStill **writing")
    answer = page.locator("article.run .answer")
    await expect(answer.locator("h4")).to_have_text("Compared")
    await expect(answer.locator("table td").first).to_have_text("1")
    await expect(answer).to_have_attribute("aria-busy", "true")
    await expect(answer).not_to_contain_text("|")
