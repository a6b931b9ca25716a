"""A way forward after every run: Retry, Continue, Edit and Regenerate; retries of the model
shown; a dead server shown as disconnected, with queued input; errors in plain words, the
rejected text kept in the composer (issue 12, item 8).

The server acting on retry/continue comes with the protocol half of issue 12; these tests
check that the page offers the buttons and sends the right frames.
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.openai_server import FakeLLM, Reply
from tests.fakes.page_socket import PageSocket
from tests.ui.helpers import expect, open_page, send, start_run

ERROR_CODES = re.compile(
    r"llm_error|run_in_progress|invalid_message|agent_max_steps|HTTP|\(\w+_\w+\)"
)


async def test_retry_after_an_error_shows_the_model_being_retried(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Check the weather")
    fake.emit(
        "error", code="llm_error", message="The language model answered with an error (HTTP 503)."
    )
    fake.emit("response_complete")

    run = page.locator("article.run")
    await expect(run.locator(".notice.error")).to_have_text(
        "The model could not answer: the model service is unavailable right now."
    )
    notice = await run.locator(".notice.error").inner_text()
    assert not ERROR_CODES.search(notice), notice
    # the step opened by agent_turn_start showed nothing: it is not left behind, empty
    await expect(run.locator("section.step")).to_have_count(0)
    await expect(run.locator("details.work")).to_have_count(0)
    retry = page.get_by_role("button", name="Retry")
    await expect(retry).to_be_visible()
    await expect(page.get_by_role("button", name="Edit message")).to_be_visible()
    await expect(page.get_by_role("button", name="Regenerate")).to_have_count(0)
    await snap("error-retry")

    await retry.click()
    await fake.wait_sent(lambda f: f == {"type": "agent_control", "action": "retry"})
    await expect(retry).to_have_count(0)
    await expect(page.locator("#send")).to_have_text("Stop")

    fake.new_run()
    fake.emit("agent_user_message", content="Check the weather", agent_mode=True)
    fake.emit("agent_start", max_steps=10)
    fake.emit("agent_turn_start", step=1)
    fake.emit(
        "agent_llm_retry",
        step=1,
        phase="reason",
        attempt=2,
        max_attempts=3,
        reason="HTTP 503",
        delay_ms=500,
    )
    second = page.locator("article.run").nth(1)
    await expect(second.locator(".bubble.user")).to_have_text("Check the weather")
    await expect(second.locator(".retrying")).to_have_text(
        "The model did not answer; retrying (2/3)…"
    )
    await snap("retrying")
    fake.emit("agent_reason_delta", step=1, delta="Looking outside.")
    await expect(second.locator(".retrying")).to_have_count(0)
    fake.emit("agent_reason", step=1, content="Looking outside.")
    await expect(second.locator(".step .phase")).to_have_text(re.compile(r"^Acting · \d+ s"))
    fake.emit(
        "agent_llm_retry",
        step=1,
        phase="observe",
        attempt=2,
        max_attempts=3,
        reason="HTTP 503",
        delay_ms=500,
    )  # the step says which call is retried
    await expect(second.locator(".step .phase")).to_have_text(re.compile(r"^Observing · \d+ s"))


async def test_continue_after_the_step_limit_and_edit_or_regenerate(
    ui_server: Any, page: Any, viewport: str
) -> None:
    fake = await PageSocket(
        defaults={"agent_mode": True, "max_steps": 4, "max_steps_limit": 20, "style": "balanced"}
    ).install(page)
    await open_page(page, ui_server.url)
    await expect(page.locator("#max-steps")).to_have_value("4")
    await start_run(page, fake, "Research everything")
    fake.emit(
        "agent_completion",
        steps=4,
        final_answer="Partial findings; more is left.",
        stop_reason="max_steps",
        usage={},
    )
    fake.emit("response_complete")

    await expect(page.locator(".run-meta").last).to_have_text("Step limit reached after 4 steps")
    await page.locator("#max-steps").fill("8")
    await page.locator("#max-steps").dispatch_event("change")
    await page.get_by_role("button", name="Continue").click()
    sent = await fake.wait_sent(lambda f: f.get("action") == "continue")
    assert sent == {"type": "agent_control", "action": "continue", "agent_max_steps": 8}

    fake.new_run()
    fake.emit("agent_start", max_steps=8)
    fake.emit(
        "agent_completion", steps=1, final_answer="All done.", stop_reason="finished", usage={}
    )
    fake.emit("response_complete")
    await expect(page.locator(".answer").last).to_have_text("All done.")

    await page.get_by_role("button", name="Edit message").click()
    await expect(page.locator("#message")).to_have_value("Research everything")
    await expect(page.locator("#message")).to_be_focused()
    await page.locator("#message").fill("")
    await page.get_by_role("button", name="Regenerate").click()
    regenerated = await fake.wait_sent(
        lambda f: f["type"] == "chat" and len([g for g in fake.sent if g["type"] == "chat"]) == 2
    )
    assert regenerated["content"] == "Research everything"


async def test_a_stuck_run_says_so_and_offers_retry(ui_server: Any, page: Any) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "Find the museum's hours")
    fake.emit(
        "agent_completion",
        steps=4,
        final_answer="I stopped here because I kept trying the same thing.",
        stop_reason="stuck",
        usage={},
    )
    fake.emit("response_complete")
    await expect(page.locator(".run-meta").last).to_have_text(
        "Stopped after 4 steps: the same thing kept failing"
    )
    await expect(page.get_by_role("button", name="Retry")).to_be_visible()
    await expect(page.get_by_role("button", name="Continue")).to_have_count(0)
    await page.get_by_role("button", name="Retry").click()
    await fake.wait_sent(lambda f: f == {"type": "agent_control", "action": "retry"})


async def test_a_stopped_run_offers_retry(ui_server: Any, page: Any, fake_llm: FakeLLM) -> None:
    fake_llm.script("reason", Reply(chunks=["Thinking", " slowly"], hang_after=1))
    await open_page(page, ui_server.url)  # the real server this time
    await send(page, "Take your time")
    await expect(page.locator(".step .reason")).to_have_text("Thinking")
    await page.keyboard.press("Escape")
    await expect(page.locator(".notice.warning")).to_have_text("Stopped by you at step 1.")
    await expect(page.get_by_role("button", name="Retry")).to_be_visible()
    await expect(page.get_by_role("button", name="Edit message")).to_be_visible()


async def test_a_dead_server_shows_as_disconnected_and_queued_input_waits(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await start_run(page, fake, "First question")
    await expect(page.locator(".step .phase")).to_have_text(re.compile(r"^Thinking · \d+ s"))
    await expect(page.locator("#send")).to_have_text("Stop")

    fake.accepting = False
    await fake.drop()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "reconnecting")
    await expect(page.locator("#conn")).to_contain_text("Disconnected")
    await expect(page.locator("#send")).to_have_text("Send")  # no Stop that cannot be sent
    await expect(page.locator(".step .phase")).to_be_hidden()  # no "thinking…"
    await expect(page.locator("body")).to_have_class(re.compile(r"\boffline\b"))

    # the run ended while the server was away; a new message waits for the connection
    fake.emit("response_complete")  # nobody receives it now: it is replayed on reconnect
    await send(page, "Second question")
    queued = page.locator("article.run.queued")
    await expect(queued.locator(".bubble.user")).to_have_text("Second question")
    await expect(page.locator("#composer-note")).to_contain_text("waits")
    assert "Waiting for the connection" in await queued.locator(".run-body").evaluate(
        "(n) => getComputedStyle(n, '::after').content"
    )
    await snap("disconnected-queued")
    assert [f["content"] for f in fake.sent if f["type"] == "chat"] == ["First question"]

    fake.session["status"] = "idle"
    fake.accepting = True
    sent = await fake.wait_sent(lambda f: f.get("content") == "Second question", timeout=15)
    assert sent["type"] == "chat"
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
    await expect(page.locator("article.run.queued")).to_have_count(0)
    await expect(page.locator("#composer-note")).to_be_hidden()
    await expect(page.locator("#send")).to_have_text("Stop")


async def test_a_refused_message_stays_in_the_composer_with_a_plain_reason(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await page.locator("#max-steps").fill("60")
    await page.locator("#max-steps").dispatch_event("change")
    await send(page, "Do a lot")
    sent = await fake.wait_sent(lambda f: f["type"] == "chat")
    assert sent["agent_max_steps"] == 60
    fake.send(
        {
            "type": "error",
            "code": "invalid_message",
            "message": "agent_max_steps: must be at most 50 (got 60).",
        }
    )

    note = page.locator("#composer-note")
    await expect(note).to_have_text("Max steps can be at most 50. Lower it and send again.")
    await expect(page.locator("#message")).to_have_value("Do a lot")
    await expect(page.locator("article.run")).to_have_count(0)
    await expect(page.locator("#send")).to_have_text("Send")
    await snap("refused")

    await send(page, "Do a lot")
    await fake.wait_sent(lambda f: len([g for g in fake.sent if g["type"] == "chat"]) == 2)
    fake.send(
        {
            "type": "error",
            "code": "run_in_progress",
            "message": "A run is already active in this session; stop it first.",
        }
    )
    await expect(note).to_have_text(
        "The agent is still working on this chat. Wait for it, or stop it, then send again."
    )
    await expect(page.locator("#message")).to_have_value("Do a lot")
    assert not ERROR_CODES.search(await note.inner_text())


async def test_every_server_error_reads_as_plain_words(ui_server: Any, page: Any) -> None:
    cases = [
        ("run_in_progress", "A run is already active in this session; stop it first."),
        ("too_many_runs", "Your organization already has 20 active runs, the limit; wait."),
        ("invalid_message", "tools: unknown tool 'x' (enabled: get_current_time)."),
        ("invalid_message", "agent_max_steps: must be at most 50 (got 60)."),
        ("no_active_run", "There is no active run to stop."),
        ("not_awaiting_input", "No question is waiting for an answer."),
        ("nothing_to_retry", "The last run finished; there is nothing to retry."),
        ("unknown_type", "type: expected one of chat, agent_control, agent_user_input."),
        ("invalid_json", "The frame is not a JSON object."),
        ("llm_error", "The language model answered with an error (HTTP 429)."),
        ("llm_error", "The language model answered with an error (HTTP 503): Overloaded."),
        ("llm_error", "The language model answered with an error (HTTP 404): No model x."),
        ("llm_error", "The language model could not be reached (ConnectError)."),
        ("llm_error", "The language model's reply broke off or could not be read (ReadError)."),
        ("storage_error", "SQLite write failed: disk I/O error"),
        ("internal_error", "The run took longer than its time limit (600 s)."),
        ("some_new_code", "Something new went wrong."),
    ]
    await page.goto(ui_server.url)
    texts = await page.evaluate(
        """async (cases) => {
        const { plainError } = await import("./static/errors.js");
        return cases.map(([code, message]) => plainError(code, message));
    }""",
        cases,
    )
    for (code, _), text in zip(cases, texts, strict=True):
        assert text and text[0].isupper() and text.endswith((".", "…", ".”")), (code, text)
        assert not ERROR_CODES.search(text), (code, text)
        assert "_" not in text and "SQLite" not in text and "Error" not in text, (code, text)
    assert texts[9] == "The model could not answer: the model service is overloaded right now."
    assert texts[10] == (
        "The model could not answer: the model service is unavailable right now. "
        "It said: “Overloaded.”"
    )
    assert texts[11] == (
        "The model could not answer: the model service had a problem. It said: “No model x.”"
    )
    assert texts[-1] == "Something new went wrong."
