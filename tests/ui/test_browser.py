"""The bundled web UI in a real Chromium, against the real server and the scripted fake LLM.

Every state a test reaches is saved as a screenshot under pytest's temporary folder (or
$UI_ARTIFACTS; see conftest.py). The screenshots in docs/ come from scripts/ui_screenshots.py.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

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

from tests.fakes.openai_server import (  # noqa: E402
    FakeLLM,
    FakeToolCall,
    Reply,
    act,
    observe,
    reason,
    text,
)

expect = pw.expect
expect.set_options(timeout=10_000)


class Wire:
    """What the page sends and where it connects, recorded from the browser's side."""

    def __init__(self, page: Any) -> None:
        self.urls: list[str] = []
        self.sent: list[dict[str, Any]] = []
        page.on("websocket", self._socket)

    def _socket(self, ws: Any) -> None:
        self.urls.append(ws.url)
        ws.on("framesent", lambda payload: self.sent.append(json.loads(payload)))

    def sent_types(self) -> list[str]:
        return [f["type"] for f in self.sent]


async def open_page(page: Any, url: str) -> None:
    await page.goto(url)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")


async def send(page: Any, message: str) -> None:
    await page.locator("#message").fill(message)
    await page.locator("#message").press("Enter")


def script_time_run(fake_llm: FakeLLM, final: Any, **observe_kw: Any) -> None:
    """`final`: the answer text, or a function of the clock tool's result (so the screenshot
    never shows an answer that disagrees with its own tool card)."""

    def answer(body: dict[str, Any]) -> Any:
        text = final
        if callable(final):
            result = next(m for m in body["messages"] if m["role"] == "tool")
            text = final(json.loads(result["content"]))
        return observe("That answers the question.", final=text, **observe_kw)

    fake_llm.script(
        "reason",
        reason("Let me check the clock in UTC."),
        reason("I have the time now.", finish=True),
    )
    fake_llm.script("act", act(FakeToolCall("get_current_time", {"timezone": "UTC"})))
    fake_llm.script("observe", observe("The tool returned the current UTC time."), answer)


def clock_answer(now: dict[str, Any]) -> str:
    return (
        f"It is **{now['time'][:5]}** in UTC.\n\n- date: `{now['date']}`\n"
        f"- weekday: {now['weekday']}"
    )


async def test_a_full_run_shows_steps_a_tool_card_and_a_markdown_answer(
    ui_server: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    script_time_run(fake_llm, clock_answer)
    wire = Wire(page)
    await open_page(page, ui_server.url)

    # Shift+Enter makes a new line and sends nothing; Enter sends.
    await page.locator("#message").press_sequentially("first line")
    await page.locator("#message").press("Shift+Enter")
    await page.locator("#message").press_sequentially("second line")
    await expect(page.locator("#message")).to_have_value("first line\nsecond line")
    assert "chat" not in wire.sent_types()
    await send(page, "What time is it in UTC?")

    run = page.locator("article.run")
    await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(run.locator(".bubble.user")).to_have_text("What time is it in UTC?")
    await expect(run.locator(".step .badge")).to_have_text(["Step 1", "Step 2"])
    await expect(run.locator(".step").first.locator(".reason")).to_have_text(
        "Let me check the clock in UTC."
    )
    await expect(run.locator(".step").first.locator(".observe")).to_have_text(
        "The tool returned the current UTC time."
    )
    card = run.locator("details.tool")
    await expect(card.locator(".tool-name")).to_have_text("get_current_time")
    await expect(card.locator(".tool-status")).to_have_text(re.compile(r"✓ \d+ ms"))
    # the steps folded into one line when the run ended; it opens again
    work = run.locator("details.work")
    await expect(work).not_to_have_attribute("open", "")
    await expect(work.locator(".work-summary")).to_have_text(
        re.compile(r"^Worked for \d+ s · 2 steps · 1 tool$")
    )
    await expect(card).to_be_hidden()
    await work.locator(".work-summary").click()
    await card.locator("summary").click()
    await expect(card).to_have_attribute("open", "")
    await expect(card.locator("pre").first).to_contain_text('"timezone": "UTC"')
    await expect(card.locator("pre").nth(1)).to_contain_text('"iso"')
    answer = run.locator(".answer")
    await expect(answer.locator("strong")).to_have_text(re.compile(r"^\d\d:\d\d$"))
    await expect(answer.locator("li")).to_have_count(2)
    await expect(answer.locator("code")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d$"))
    await expect(run.locator(".run-meta").last).to_contain_text("Finished in 2 steps")
    await expect(page.locator("#send")).to_have_text("Send")
    await expect(page.locator(".session[aria-current=true]")).to_contain_text(
        "What time is it in UTC?"
    )
    sent = [f for f in wire.sent if f["type"] == "chat"]
    assert sent == [{"type": "chat", "content": "What time is it in UTC?", "agent_mode": True}]
    await snap("full-run")
    light = await page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    await page.emulate_media(color_scheme="dark")
    assert await page.evaluate("() => getComputedStyle(document.body).backgroundColor") != light
    await snap("full-run-dark")
    await page.emulate_media(color_scheme="light")

    # New chat, then reopen the first one from the sidebar: its history is replayed.
    first_session = wire.urls[-1]
    await page.locator("#new-chat").click()
    await expect(page.locator("article.run")).to_have_count(0)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
    await page.locator(".session", has_text="What time is it in UTC?").click()
    await expect(run.locator(".answer strong")).to_have_text(re.compile(r"^\d\d:\d\d$"))
    await expect(run.locator(".bubble.user")).to_have_text("What time is it in UTC?")
    await expect(run.locator("details.tool .tool-status")).to_have_text(re.compile(r"✓ \d+ ms"))
    await expect(run.locator(".step")).to_have_count(2)
    assert "session_id=" not in first_session
    assert re.search(r"session_id=\w+&after_seq=0\b", wire.urls[-1]), wire.urls
    await snap("history-replayed")


async def test_stop_while_the_model_streams(
    ui_server: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    fake_llm.script(
        "reason", Reply(chunks=["Thinking hard", " about this", " forever"], hang_after=2)
    )
    wire = Wire(page)
    await open_page(page, ui_server.url)
    await send(page, "Take your time")

    await expect(page.locator(".step .reason")).to_have_text("Thinking hard about this")
    await expect(page.locator("#send")).to_have_text("Stop")
    await expect(page.locator(".step .phase")).to_have_text(re.compile(r"^Thinking · \d+ s"))
    await snap("streaming")
    await page.keyboard.press("Escape")

    await expect(page.locator(".notice.warning")).to_have_text("Stopped by you at step 1.")
    await expect(page.locator("article.run")).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(page.locator("#send")).to_have_text("Send")
    assert {"type": "agent_control", "action": "stop"} in wire.sent
    await snap("stopped")

    # The session stays usable: the next message runs to the end.
    await send(page, "Now answer quickly")
    await expect(page.locator("article.run").nth(1).locator(".answer")).to_have_text(
        "Here is the answer."
    )


async def test_answering_a_question_from_the_agent(
    ui_server: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    fake_llm.script("reason", reason("I need to know the city first."))
    fake_llm.script(
        "act", act(FakeToolCall("request_input", {"question": "Which city should I use?"}))
    )
    fake_llm.script("observe", observe("The user chose Paris.", final="Paris it is: **noon**."))
    await open_page(page, ui_server.url)
    base_title = await page.title()
    await send(page, "What time is it where I am?")

    banner = page.locator("#ask")
    await expect(banner).to_be_visible()
    await expect(page.locator("#ask-question")).to_have_text("Which city should I use?")
    await expect(page.locator("#message")).to_be_focused()  # one composer: it answers
    await expect(page.locator("#send")).to_have_text("Answer")
    await expect(page.locator("body")).to_have_class(re.compile(r"\bawaiting\b"))
    await page.wait_for_function("() => document.title.includes('Input needed')")
    # The title alternates: back to the plain one, the flash goes on.
    await page.wait_for_function(f"() => document.title === {json.dumps(base_title)}")
    await expect(page.locator(".note.question")).to_have_text("Asked you: Which city should I use?")
    await expect(banner).to_have_css("animation-name", "glow")
    await snap("request-input")
    await page.emulate_media(reduced_motion="reduce")
    await expect(banner).to_have_css("animation-name", "none")

    await page.locator("#message").fill("Paris")
    await page.locator("#message").press("Enter")
    await expect(banner).to_be_hidden()
    await expect(page.locator(".answer strong")).to_have_text("noon")
    await expect(page.locator(".note.answer")).to_have_text("You answered: Paris")
    await expect(page).to_have_title(base_title)
    await expect(page.locator("body")).not_to_have_class(re.compile(r"\bawaiting\b"))
    observed = await fake_llm.wait_for("observe")
    tool_results = [m for m in observed.body["messages"] if m.get("role") == "tool"]
    assert tool_results and tool_results[-1]["content"] == "Paris"
    await snap("request-input-answered")


async def test_a_reload_mid_run_resumes_and_shows_the_run_finish(
    ui_server: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    words = ["Reading", " the", " tool", " result", " slowly", " and", " carefully", " now."]
    block = json.dumps(
        {
            "observation": "ok",
            "should_continue": False,
            "final_answer": "Finished after the reload.",
        }
    )
    fake_llm.script("reason", reason("Checking the clock."))
    fake_llm.script("act", act(FakeToolCall("get_current_time", {"timezone": "UTC"})))
    fake_llm.script("observe", Reply(chunks=[*words, "\n", block], delay_s=0.3))
    wire = Wire(page)
    await open_page(page, ui_server.url)
    await send(page, "Slow one, please")

    await expect(page.locator(".step .observe")).to_contain_text("Reading the")
    await expect(page.locator("article.run")).not_to_have_class(re.compile(r"\bcomplete\b"))
    await snap("before-reload")
    await page.reload()

    run = page.locator("article.run")
    await expect(run.locator(".answer")).to_have_text("Finished after the reload.")
    await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
    await expect(run).to_have_count(1)
    await expect(run.locator(".bubble.user")).to_have_text("Slow one, please")
    await expect(run.locator(".step")).to_have_count(1)
    await expect(run.locator(".reason")).to_have_text("Checking the clock.")
    await expect(run.locator(".observe")).to_have_text("".join(words))
    await expect(run.locator("details.tool")).to_have_count(1)
    resumed = re.search(r"after_seq=(\d+)", wire.urls[-1])
    assert resumed and int(resumed.group(1)) > 0, wire.urls  # it resumed after what it had seen
    await snap("after-reload")


async def test_a_dropped_connection_reconnects_and_misses_nothing(
    ui_server: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    words = ["Streaming", " through", " a", " network", " failure", " without", " a", " gap."]
    block = json.dumps({"observation": "ok", "should_continue": False, "final_answer": "Intact."})
    fake_llm.script("observe", Reply(chunks=[*words, "\n", block], delay_s=0.25))
    wire = Wire(page)
    await open_page(page, ui_server.url)
    await page.evaluate("""() => {
        const conn = document.getElementById("conn");
        window.connStates = [];
        new MutationObserver(() => window.connStates.push(conn.dataset.state))
            .observe(conn, { attributes: true, attributeFilter: ["data-state"] });
    }""")
    await send(page, "Keep going")
    await expect(page.locator(".step .observe")).to_contain_text("Streaming through")

    assert ui_server.drop_connections() >= 1
    await page.wait_for_function("() => window.connStates.includes('reconnecting')")
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
    await expect(page.locator(".answer")).to_have_text("Intact.")
    await expect(page.locator(".observe")).to_have_text("".join(words))  # no gap, no repeat
    await expect(page.locator(".step")).to_have_count(1)
    assert len(wire.urls) == 2
    resumed = re.search(r"after_seq=(\d+)", wire.urls[1])
    assert resumed and int(resumed.group(1)) > 0, wire.urls
    await snap("reconnected")


INJECT_IMG = "<img src=x onerror=\"window.__pwned='img'\">"
INJECT_SCRIPT = "<script>window.__pwned='script'</script>"


async def test_model_and_tool_text_cannot_inject_markup(
    ui_server: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    fake_llm.script("reason", reason(f"Thinking {INJECT_SCRIPT} about {INJECT_IMG}"))
    fake_llm.script("act", act(FakeToolCall("get_current_time", {"timezone": INJECT_IMG})))
    final = (
        f"**Safe** {INJECT_IMG} and {INJECT_SCRIPT}\n\n"
        "[click me](javascript:window.__pwned='link') [docs](https://example.com/docs)\n\n"
        "```\n<b>not bold</b>\n```"
    )
    fake_llm.script("observe", observe(f"Saw {INJECT_IMG}", final=final))
    await open_page(page, ui_server.url)
    await send(page, f"Hello {INJECT_IMG}")

    run = page.locator("article.run")
    await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
    conversation = page.locator("#conversation")
    await expect(conversation.locator("img")).to_have_count(0)
    await expect(conversation.locator("script")).to_have_count(0)
    await expect(conversation.locator("b")).to_have_count(0)
    await expect(conversation.locator("a[href^='javascript']")).to_have_count(0)
    await expect(run.locator(".bubble.user")).to_have_text(f"Hello {INJECT_IMG}")
    await expect(run.locator(".reason")).to_have_text(
        f"Thinking {INJECT_SCRIPT} about {INJECT_IMG}"
    )
    card = run.locator("details.tool")
    await expect(card).to_have_attribute("open", "")  # errors are shown open
    await expect(card.locator(".tool-status")).to_have_text("✗ error")
    await expect(card.locator("pre").first).to_contain_text("<img src=x onerror=")
    await expect(card.locator("pre.error")).to_contain_text("<img src=x onerror=")
    answer = run.locator(".answer")
    await expect(answer.locator("strong")).to_have_text("Safe")
    await expect(answer).to_contain_text(f"{INJECT_IMG} and {INJECT_SCRIPT}")
    await expect(answer).to_contain_text("click me (javascript:window.__pwned='link')")
    await expect(answer.locator("a")).to_have_attribute("href", "https://example.com/docs")
    await expect(answer.locator("pre code")).to_have_text("<b>not bold</b>")
    assert await page.evaluate("window.__pwned") is None
    await snap("injection-as-text")


async def test_chat_mode_with_a_token_from_the_page_url(
    ui_server_factory: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    token = "ui-test-token-0123456789"
    fake_llm.script("chat", text("Hello ", "from ", "**chat mode**", delay_s=0.05))
    wire = Wire(page)
    auth = {"tokens": {token: {"tenant": "acme", "user": "alice"}}}
    async with ui_server_factory(auth=auth) as server:
        await open_page(page, f"{server.url}?token={token}")
        assert "token" not in page.url  # taken out of the address bar, kept for this tab
        await page.locator("#agent-mode").uncheck()
        await expect(page.locator("#max-steps")).to_be_disabled()
        await send(page, "hi there")

        answer = page.locator(".answer")
        await expect(answer.locator("strong")).to_have_text("chat mode")
        await expect(answer).to_have_text("Hello from chat mode")
        await expect(page.locator(".step")).to_have_count(0)
        await expect(page.locator(".session[aria-current=true]")).to_contain_text("hi there")
        assert "token" not in wire.urls[0]  # sent as a subprotocol, never in a URL
        assert {"type": "chat", "content": "hi there", "agent_mode": False} in wire.sent
        await snap("chat-mode")
        await page.close()  # before the server goes, so the page does not try to reconnect


MARKDOWN_PROBE = """async (inputs) => {
    const { renderMarkdown } = await import("./static/markdown.js");
    const TAGS = new Set(["P", "BR", "STRONG", "EM", "DEL", "CODE", "PRE", "A", "UL", "OL", "LI",
        "H3", "H4", "H5", "H6", "HR", "BLOCKQUOTE", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD",
        "DIV"]);
    const ATTRS = new Set(["href", "rel", "target", "start", "class", "data-lang"]);
    return inputs.map((input) => {
        const box = document.createElement("div");
        box.append(renderMarkdown(input));
        const problems = [];
        for (const node of box.querySelectorAll("*")) {
            if (!TAGS.has(node.tagName)) problems.push(`tag ${node.tagName}`);
            for (const attr of node.attributes) {
                if (!ATTRS.has(attr.name)) problems.push(`attribute ${attr.name}`);
            }
            if (node.hasAttribute("href") && !/^(https?|mailto):/.test(node.getAttribute("href"))) {
                problems.push(`href ${node.getAttribute("href")}`);
            }
        }
        return { html: box.innerHTML, text: box.textContent, problems };
    });
}"""


async def test_the_markdown_renderer_builds_only_safe_nodes(ui_server: Any, page: Any) -> None:
    examples = {
        "a **b** _c_ `d` ~~e~~": (
            "<p>a <strong>b</strong> <em>c</em> <code>d</code> <del>e</del></p>"
        ),
        "snake_case_name and 2 * 3 * 4": "<p>snake_case_name and 2 * 3 * 4</p>",
        "# Title\n\n1. one\n2. two": "<h3>Title</h3><ol><li>one</li><li>two</li></ol>",
        "| a | b |\n|---|---|\n| 1 | 2 |": (
            '<div class="table-wrap"><table><thead><tr><th>a</th><th>b</th></tr></thead>'
            "<tbody><tr><td>1</td><td>2</td></tr></tbody></table></div>"
        ),
        "> quoted\n\n```py\nx = '<b>'\n```": (
            "<blockquote><p>quoted</p></blockquote>"
            "<pre><code data-lang=\"py\">x = '&lt;b&gt;'</code></pre>"
        ),
        "see https://example.com/a_b.": (
            '<p>see <a href="https://example.com/a_b" '
            'rel="noopener noreferrer nofollow" target="_blank">https://example.com/a_b</a>.</p>'
        ),
        "- top\n  - nested\n  - again\n- next": (
            "<ul><li>top<ul><li>nested</li><li>again</li></ul></li><li>next</li></ul>"
        ),
        "1. one\n    - deep\n2. two": ("<ol><li>one<ul><li>deep</li></ul></li><li>two</li></ol>"),
        "at <https://example.org>": (
            '<p>at <a href="https://example.org/" '
            'rel="noopener noreferrer nofollow" target="_blank">https://example.org</a></p>'
        ),
        "![a chart](https://example.org/c.png)": (
            '<p><a href="https://example.org/c.png" '
            'rel="noopener noreferrer nofollow" target="_blank">Image: a chart</a></p>'
        ),
        "![x](javascript:alert(1))": "<p>Image: x (javascript:alert(1))</p>",
    }
    hostile = [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](data:text/html,<script>alert(1)</script>)",
        "[x](vbscript:msgbox)",
        "**<svg onload=alert(1)>**",
        "`<iframe src=//evil>`",
        "<a href=javascript:alert(1)>x</a>",
        "[<img src=x onerror=alert(1)>](https://ok.example)",
        "| <b>x</b> |\n|---|\n| <i>y</i> |",
        "- <style>*{display:none}</style>",
        "&lt;script&gt; &amp; &#60;b&#62;",
        "\u0000\u202e<x>",
        "[a](<javascript:alert(1)>)",
    ]
    rng = random.Random(5)
    pieces = [
        "*",
        "**",
        "_",
        "__",
        "`",
        "~~",
        "[",
        "]",
        "(",
        ")",
        "<",
        ">",
        "#",
        "-",
        "1.",
        "|",
        "\n",
        " ",
        "a",
        "b",
        "http://x.example/",
        "javascript:",
        "'",
        '"',
        "&",
        ">",
        "```",
    ]
    fuzz = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    inputs = [*examples, *hostile, *fuzz]

    await page.goto(ui_server.url)
    results = await page.evaluate(MARKDOWN_PROBE, inputs)

    for source, result in zip(inputs, results, strict=True):
        assert not result["problems"], (source, result)
    for (source, html), result in zip(examples.items(), results, strict=False):
        assert result["html"] == html, source
    for source, result in zip(hostile, results[len(examples) :], strict=False):
        visible = source.replace("\u0000", "\ufffd")
        for fragment in ("<script", "<img", "<svg", "<iframe", "<style", "<b>", "<i>"):
            if fragment in visible and "](" not in visible:
                assert fragment in result["text"], (source, result)  # shown as text


async def test_verify_and_plan_events_are_shown_as_plain_notes(
    ui_server_factory: Any, page: Any, fake_llm: FakeLLM, snap: Any
) -> None:
    block = {
        "plan": "x",
        "tools_to_consider": [],
        "finish": False,
        "plan_steps": ["Check the clock", "Tell you the time"],
    }
    fake_llm.script("reason", text("Planning first.\n", json.dumps(block)))
    fake_llm.script("act", act(FakeToolCall("get_current_time", {"timezone": "Mars/Base"})))
    fake_llm.script(
        "observe",
        observe("It failed.", final="Done!"),
        observe("Still failed.", final="I could not read the clock."),
    )
    fake_llm.script(
        "verify",
        text('The clock call failed. {"done": false, "reason": "The clock call failed."}'),
        text('{"done": true, "reason": "It says so plainly."}'),
    )
    async with ui_server_factory(agent={"plan_every": 5}) as server:
        await open_page(page, server.url)
        await send(page, "What time is it on Mars?")
        run = page.locator("article.run")
        await expect(run).to_have_class(re.compile(r"\bcomplete\b"))
        await expect(run.locator(".note.plan")).to_have_text(
            "Plan: 1. Check the clock  2. Tell you the time"
        )
        await expect(run.locator(".note.warning", has_text="Not finished yet")).to_have_text(
            "Not finished yet: The clock call failed."
        )
        await expect(run.locator(".answer")).to_have_text("I could not read the clock.")
        await snap("verify-and-plan")


async def test_another_site_cannot_frame_the_page(ui_server: Any, page: Any) -> None:
    """Clickjacking: a page elsewhere that puts the UI in a frame (in no-auth mode, where
    anyone who reaches the port is the user) gets Chromium's refusal, not the chat."""
    await page.set_content(f'<iframe id="victim" src="{ui_server.url}"></iframe>')
    frame = await (await page.wait_for_selector("#victim")).content_frame()
    await frame.wait_for_load_state("load", timeout=10_000)
    assert await frame.query_selector("#new-chat") is None
    direct = await page.goto(ui_server.url)  # the page itself still opens
    assert direct.ok and await page.query_selector("#new-chat") is not None
