"""Chats: rename, delete, search, date groups, the running marker on long titles, the welcome
state, code blocks, tables, "jump to latest", max steps per chat (issue 12, item 10)."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.fakes.openai_server import FakeLLM, Reply
from tests.fakes.page_socket import PageSocket
from tests.ui.helpers import allow_clipboard, clipboard, expect, open_chats, open_page, send

LONG_TITLE = "Please compare the train timetables between Lisbon and Porto for every weekday"


async def finish_run(page: Any, text: str) -> None:
    await send(page, text)
    await expect(page.locator("article.run").last).to_have_class(re.compile(r"\bcomplete\b"))


async def test_rename_search_and_delete_chats(
    ui_server: Any, page: Any, fake_llm: FakeLLM, viewport: str, snap: Any
) -> None:
    await open_page(page, ui_server.url)
    await finish_run(page, "Plan a trip to Rome")
    await page.locator("#new-chat-top" if viewport == "phone" else "#new-chat").click()
    await expect(page.locator("article.run")).to_have_count(0)
    await finish_run(page, "Explain sourdough starters")

    await open_chats(page, viewport)
    items = page.locator(".session-item")
    await expect(items).to_have_count(2)
    await expect(page.locator(".session-group")).to_have_text(["Today"])
    rome = items.filter(has_text="Plan a trip to Rome")
    await rome.hover()  # on a desktop Rename and Delete show on hover or focus
    await rome.get_by_role("button", name=re.compile("^Rename")).click()
    rename = page.locator(".rename-input")
    await expect(rename).to_be_focused()
    await rename.fill("   ")  # a blank name is refused, and said so
    await rename.press("Enter")
    await expect(page.locator("#sessions-status")).to_have_text(
        "A chat's name cannot be empty; it keeps its name."
    )
    await expect(items.filter(has_text="Plan a trip to Rome")).to_have_count(1)
    await rome.hover()
    await rome.get_by_role("button", name=re.compile("^Rename")).click()
    await rename.fill("Rome, May 2027")
    await rename.press("Enter")
    await expect(items.filter(has_text="Rome, May 2027")).to_have_count(1)
    async with httpx.AsyncClient(base_url=ui_server.url) as http:
        titles = [s["title"] for s in (await http.get("api/sessions")).json()["sessions"]]
    assert "Rome, May 2027" in titles

    search = page.locator("#chat-search")
    await search.fill("rome")
    await expect(items).to_have_count(1)
    await expect(items).to_contain_text("Rome, May 2027")
    await search.fill("zzz")
    await expect(page.locator(".sessions-empty")).to_have_text("No chats match your search.")
    await search.press("Escape")
    await expect(items).to_have_count(2)
    await snap("chats-renamed")

    # delete the open chat: the page moves to a new one without a warning
    sourdough = items.filter(has_text="Explain sourdough starters")
    await sourdough.locator(".session").focus()  # the keyboard way: focus shows the buttons
    await page.keyboard.press("Tab")
    await page.keyboard.press("Tab")
    await expect(sourdough.get_by_role("button", name=re.compile("^Delete"))).to_be_focused()
    await page.keyboard.press("Enter")
    # Asked in the list, Cancel first: Esc keeps the chat, Enter would too.
    await expect(page.get_by_role("button", name="Cancel, keep the chat")).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(items.filter(has_text="sourdough")).to_have_count(1)
    await expect(sourdough.locator(".session")).to_be_focused()
    await page.keyboard.press("Tab")
    await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    await page.get_by_role("button", name=re.compile("^Yes, delete")).click()
    await expect(page.locator("#sessions-status")).to_have_text(
        "Deleted “Explain sourdough starters”."
    )
    await expect(items.filter(has_text="sourdough")).to_have_count(0)
    await expect(page.locator("article.run")).to_have_count(0)
    await expect(page.locator(".notice")).to_have_count(0)
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
    async with httpx.AsyncClient(base_url=ui_server.url) as http:
        titles = [s["title"] for s in (await http.get("api/sessions")).json()["sessions"]]
    assert titles == ["Rome, May 2027"]


async def test_a_long_running_title_keeps_its_marker_and_delete_waits_for_the_run(
    ui_server: Any, page: Any, fake_llm: FakeLLM, viewport: str, snap: Any
) -> None:
    fake_llm.script("reason", Reply(chunks=["Reading timetables"], hang_after=1))
    await open_page(page, ui_server.url)
    await send(page, LONG_TITLE)
    await expect(page.locator(".step .reason")).to_have_text("Reading timetables")
    await open_chats(page, viewport)
    item = page.locator(".session-item", has_text="Please compare")
    await expect(item).to_have_attribute("data-status", "running")
    marker = item.locator(".session-marker")
    await expect(marker).to_be_visible()
    marker_box = await marker.bounding_box()
    list_box = await page.locator("#sessions").bounding_box()
    assert marker_box["x"] + marker_box["width"] <= list_box["x"] + list_box["width"]
    title = item.locator(".session-title")
    assert await title.evaluate("(n) => n.scrollWidth > n.clientWidth")  # cut with an ellipsis
    await snap("running-marker")

    await item.hover()
    await item.get_by_role("button", name=re.compile("^Delete")).click()
    await page.get_by_role("button", name=re.compile("^Yes, delete")).click()
    await expect(page.locator("#sessions-status")).to_have_text(
        "This chat is still running. Stop it first, then delete it."
    )
    await expect(item).to_have_count(1)
    await expect(item.locator(".session-title")).to_be_visible()  # not left asking


async def test_welcome_state_with_the_model_and_example_prompts(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    fake = await PageSocket(model="gpt-test-mini").install(page)
    await open_page(page, ui_server.url)
    welcome = page.locator("#welcome")
    await expect(welcome).to_be_visible()
    await expect(page.locator("#welcome-model")).to_have_text("Model: gpt-test-mini")
    examples = welcome.locator(".example")
    await expect(examples).to_have_count(3)
    await snap("welcome")
    first = await examples.first.inner_text()
    await examples.first.click()
    await expect(page.locator("#message")).to_have_value(first)
    await page.locator("#message").press("Enter")
    await fake.wait_sent(lambda f: f["type"] == "chat" and f["content"] == first)
    await expect(welcome).to_be_hidden()


async def test_the_welcome_state_names_the_servers_model(ui_server: Any, page: Any) -> None:
    await open_page(page, ui_server.url)  # the real server's session frame carries `model`
    await expect(page.locator("#welcome")).to_be_visible()
    await expect(page.locator("#welcome-model")).to_contain_text("gpt-4o-mini")


CODE = 'def greet(name):\n    return f"Hello, {name}!"  # <b>not bold</b>'
TABLE = (
    "| "
    + " | ".join(f"column{i}" for i in range(8))
    + " |\n|"
    + "---|" * 8
    + "\n| "
    + " | ".join(f"supercalifragilistic{i}" for i in range(8))
    + " |"
)


async def test_code_blocks_tables_and_jump_to_latest(
    ui_server: Any, page: Any, viewport: str, snap: Any
) -> None:
    await allow_clipboard(page, ui_server.url)
    fake = await PageSocket().install(page)
    await open_page(page, ui_server.url)
    await send(page, "Show me code and a table")
    await fake.wait_sent(lambda f: f["type"] == "chat")
    fake.new_run()
    answer = f"Here:\n\n```python\n{CODE}\n```\n\n{TABLE}\n"
    fake.emit("agent_completion", steps=1, final_answer=answer, stop_reason="finished", usage={})
    fake.emit("response_complete")

    block = page.locator(".answer .code-block")
    await expect(block.locator(".code-lang")).to_have_text("python")
    await expect(block.locator("code .hljs-keyword").first).to_have_text("def")
    await expect(block.locator("code")).to_have_text(CODE)
    await expect(block.locator("code b")).to_have_count(0)
    await block.get_by_role("button", name="Copy").click()
    await expect(block.get_by_role("button", name="Copied")).to_be_visible()
    assert await clipboard(page) == CODE

    wrap = page.locator(".answer .table-wrap")
    assert await wrap.evaluate("(n) => n.scrollWidth > n.clientWidth")  # it scrolls sideways
    cell = wrap.locator("td").first
    assert await cell.evaluate(
        "(n) => n.getClientRects().length === 1 && "
        "n.offsetHeight < 2.2 * parseFloat(getComputedStyle(n).lineHeight)"
    )
    await snap("code-and-table")

    # many runs later the reader scrolls up: new content does not pull them down
    for i in range(6):
        await send(page, f"Tell me more, part {i}")
        await fake.wait_sent(lambda f, i=i: f.get("content") == f"Tell me more, part {i}")
        fake.new_run()
        fake.emit(
            "agent_completion",
            steps=1,
            final_answer="More text.\n\n" * 12,
            stop_reason="finished",
            usage={},
        )
        fake.emit("response_complete")
        await expect(page.locator("article.run.complete")).to_have_count(i + 2)
    conversation = page.locator("#conversation")
    jump = page.locator("#jump")
    await expect(jump).to_be_hidden()
    await conversation.evaluate("(n) => n.scrollTo(0, 0)")
    await expect(jump).to_be_visible()
    fake.new_run()  # a run started in another tab
    fake.emit("agent_user_message", content="And the end?", agent_mode=True)
    fake.emit(
        "agent_completion", steps=1, final_answer="The end.", stop_reason="finished", usage={}
    )
    fake.emit("response_complete")
    await expect(page.locator(".answer").last).to_have_text("The end.")
    assert await conversation.evaluate("(n) => n.scrollTop") < 50
    await snap("jump-to-latest")
    await jump.click()
    await expect(jump).to_be_hidden()
    await expect(page.locator(".answer").last).to_be_in_viewport()


async def test_max_steps_resets_for_each_chat(ui_server: Any, page: Any, viewport: str) -> None:
    fake = await PageSocket(
        defaults={"agent_mode": True, "max_steps": 6, "max_steps_limit": 30, "style": "balanced"}
    ).install(page)
    await open_page(page, ui_server.url)
    steps = page.locator("#max-steps")
    await expect(steps).to_have_value("6")
    await expect(steps).to_have_attribute("max", "30")
    await steps.fill("3")
    await steps.dispatch_event("change")
    await send(page, "Quick one")
    sent = await fake.wait_sent(lambda f: f["type"] == "chat")
    assert sent["agent_max_steps"] == 3

    await page.locator("#new-chat-top" if viewport == "phone" else "#new-chat").click()
    await expect(steps).to_have_value("6")
    await send(page, "Next chat")
    sent = await fake.wait_sent(lambda f: f.get("content") == "Next chat")
    assert "agent_max_steps" not in sent
    await page.reload()
    await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
    await expect(steps).to_have_value("6")


async def test_date_groups(ui_server: Any, page: Any) -> None:
    await page.goto(ui_server.url)
    groups = await page.evaluate("""async () => {
        const { dateGroup } = await import("./static/chats.js");
        const now = new Date(2026, 10, 23, 15, 0).getTime();
        const at = (d, h) => new Date(2026, 10, d, h, 0).getTime();
        return [at(23, 1), at(22, 23), at(22, 0), at(17, 12), at(16, 12), at(1, 12),
                new Date(2026, 9, 1).getTime()].map((ts) => dateGroup(ts, now));
    }""")
    assert groups == [
        "Today",
        "Yesterday",
        "Yesterday",
        "Previous 7 days",
        "Previous 7 days",
        "Previous 30 days",
        "Older",
    ]


async def test_a_sign_in_link_says_whose_account_it_opens(
    ui_server_factory: Any, page: Any
) -> None:
    # Login CSRF: a link made with someone else's token would save what you write into their
    # account. The page names the account, says so when a link signed you in, and signs out.
    tokens = {"link-token-0123456789": {"tenant": "acme", "user": "mallory"}}
    async with ui_server_factory(auth={"tokens": tokens}) as server:
        await page.goto(f"{server.url}?token=link-token-0123456789")
        await expect(page.locator("#conn")).to_have_attribute("data-state", "connected")
        await expect(page.locator("#identity-name")).to_have_text("Signed in as mallory (acme)")
        await expect(page.locator("#composer-note")).to_contain_text("sign-in link for mallory")
        assert "token" not in page.url
        await page.locator("#sign-out").click()
        await expect(page.locator("#conn")).to_have_attribute("data-state", "unauthorized")
        assert await page.evaluate("sessionStorage.getItem('agent-chat:token')") is None


async def test_search_finds_what_was_said_and_the_model_names_chats(
    ui_server_factory: Any, page: Any, fake_llm: FakeLLM, viewport: str, snap: Any
) -> None:
    # Titles were the raw first message, and search matched titles only (issue 46, item 5).
    fake_llm.script(
        "title", Reply(chunks=["Lisbon or Porto by train"]), Reply(chunks=["Sourdough basics"])
    )
    fake_llm.script(
        "observe",
        Reply(
            chunks=[
                '{"observation": "ok", "should_continue": false, '
                '"final_answer": "The Alfa Pendular takes under three hours."}'
            ]
        ),
    )
    async with ui_server_factory(agent={"session_titles": True}) as server:
        await open_page(page, server.url)
        await finish_run(page, LONG_TITLE)
        await open_chats(page, viewport)
        items = page.locator(".session-item")
        await expect(items.locator(".session-title")).to_have_text("Lisbon or Porto by train")
        await page.locator("#new-chat").click()  # in the open drawer on a phone
        await finish_run(page, "Explain sourdough starters")
        await open_chats(page, viewport)
        await expect(items).to_have_count(2)

        await page.locator("#chat-search").fill("pendul")  # only in an answer, half typed
        hit = items.filter(has=page.locator(".session-match"))
        await expect(items).to_have_count(1)
        await expect(hit.locator(".session-title")).to_have_text("Lisbon or Porto by train")
        await expect(hit.locator(".session-match mark")).to_have_text("Pendular")
        await snap("chat-search")
        await page.locator("#chat-search").fill("sourdough")
        await expect(items.locator(".session-title mark")).to_have_text("Sourdough")


async def test_the_bundled_model_is_named_with_how_to_use_a_real_one(
    ui_server_factory: Any, page: Any, viewport: str, snap: Any
) -> None:
    """A first run without a model configured serves the bundled small model: the page says
    so, and how to point the server at a real one."""
    async with ui_server_factory(llm={"model": "bundled-qwen2.5-coder-0.5b"}) as bundled:
        await open_page(page, bundled.url)
        note = page.locator("#welcome-model")
        await expect(note).to_contain_text("bundled small local model")
        await expect(note).to_contain_text("OPENAI_API_KEY")
        await snap("welcome-bundled-model")
