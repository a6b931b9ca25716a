"""Chats people can find (issue 46, item 5): a title the model writes after the first answer
(the first words until then, and when the call fails; the user's own name always wins), and
`GET /api/sessions?q=` searching what was said, with the matches marked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from agent.errors import ModelError
from agent.messages import Message
from agent.ports import CallInfo, ModelTurn, Thinking, ToolChoice, ToolSpec
from agent.titles import clean_title
from server.storage.base import Scope
from server.storage.sqlite import SQLiteStore
from server.titles import SessionTitles, first_words
from tests.fakes.openai_server import FakeLLM, observe, reason, text

QUESTION = "What is the weather in Lisbon today, and should I take an umbrella?"
TITLES_ON = {"agent": {"session_titles": True}}


async def test_the_model_titles_a_session_after_its_first_answer(
    server_factory: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script("reason", reason("Look it up.", finish=True))
    fake_llm.script("observe", observe("Known.", final="Sunny, **no umbrella** needed."))
    fake_llm.script("title", text('Title: "Lisbon weather', ' today".\nMore words.'))
    async with server_factory(**TITLES_ON) as srv, await srv.client() as c:
        sid = (await c.recv())["session_id"]
        await c.run(QUESTION)
        (named,) = [f for f in await c.until("session_title") if f["type"] == "session_title"]
        assert named == {
            "type": "session_title",
            "session_id": sid,
            "title": "Lisbon weather today",
        }
        request = await fake_llm.wait_for("title")
        shown = request.body["messages"][-1]["content"]
        assert QUESTION in shown and "no umbrella" in shown  # the question and the answer
        async with httpx.AsyncClient(base_url=f"http://{srv.address}") as http:
            (listed,) = (await http.get("/api/sessions")).json()["sessions"]
            assert listed["title"] == "Lisbon weather today"
        await c.run("And tomorrow?")  # not the first answer: no second title
    assert fake_llm.phases().count("title") == 1


async def test_search_finds_sessions_by_what_was_said(
    server_factory: Any, fake_llm: FakeLLM
) -> None:
    fake_llm.script("observe", observe("ok", final="Take a light jacket in Lisbon."))
    async with server_factory() as srv:
        for content in (QUESTION, "Explain a hash map"):
            async with await srv.client() as c:
                await c.recv()
                await c.run(content)
        async with httpx.AsyncClient(base_url=f"http://{srv.address}") as http:
            found = (await http.get("/api/sessions", params={"q": "jack"})).json()["sessions"]
            assert [s["title"] for s in found] == [first_words(QUESTION)]
            match = found[0]["match"]
            assert [match["text"][a:b] for a, b in match["highlights"]] == ["jacket"]
            everything = (await http.get("/api/sessions", params={"q": "  "})).json()
            assert len(everything["sessions"]) == 2  # a blank query lists as before
            assert "match" not in everything["sessions"][0]
            too_long = await http.get("/api/sessions", params={"q": "x" * 201})
            assert too_long.status_code == 400 and too_long.json()["code"] == "invalid_query"


class _TitleModel:
    """A ChatModel for the title call alone: it writes `title` once `go` is set, or fails."""

    def __init__(self, title: str | None) -> None:
        self.title = title
        self.asked = asyncio.Event()
        self.go = asyncio.Event()

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec],
        call: CallInfo,
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[str | Thinking | ModelTurn]:
        self.asked.set()
        await self.go.wait()
        if self.title is None:
            raise ModelError("the model server is down")
        yield self.title
        yield ModelTurn(self.title)


class _Live:
    """What SessionTitles uses of a LiveSession."""

    def __init__(self, session_id: str) -> None:
        self.scope, self.session_id = Scope("acme", "alice"), session_id
        self.sent: list[dict[str, Any]] = []

    def notify(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)


async def _first_run(tmp_path: Path) -> tuple[SQLiteStore, _Live]:
    store = SQLiteStore(tmp_path / "t.db")
    await store.open()
    live = _Live("s1")
    await store.create_session(live.scope, "s1", 1, first_words(QUESTION))
    answer = Message("assistant", "Sunny.", phase="final", run_id="r1")
    await store.append_messages(live.scope, "s1", [Message("user", QUESTION), answer], 2)
    return store, live


async def test_a_rename_while_the_model_writes_wins(tmp_path: Path) -> None:
    store, live = await _first_run(tmp_path)
    model = _TitleModel("Lisbon weather")
    titles = SessionTitles(store, model)
    titles.after_first_run(live, "r1")  # type: ignore[arg-type]
    await asyncio.wait_for(model.asked.wait(), 5)
    assert await store.rename_session(live.scope, "s1", "My trip")
    model.go.set()
    await titles.close()  # waits for the task (cancelled or done)
    session = await store.get_session(live.scope, "s1")
    assert session is not None and session.title == "My trip" and live.sent == []
    await store.close()


async def test_a_failed_title_call_keeps_the_first_words(tmp_path: Path) -> None:
    store, live = await _first_run(tmp_path)
    model = _TitleModel(None)
    model.go.set()
    titles = SessionTitles(store, model)
    titles.after_first_run(live, "r1")  # type: ignore[arg-type]
    await asyncio.wait_for(model.asked.wait(), 5)
    async with asyncio.timeout(5):
        while titles._tasks:  # noqa: SLF001 - the task's end is what is tested
            await asyncio.wait(list(titles._tasks))  # noqa: SLF001
    session = await store.get_session(live.scope, "s1")
    assert session is not None and session.title == first_words(QUESTION)
    await store.close()


def test_a_title_reply_is_cleaned_to_one_short_line() -> None:
    assert clean_title("**Title:** Weather in Lisbon.\n\nBecause…") == "Weather in Lisbon"
    assert clean_title("\n\n") is None
    long = clean_title("word " * 30)
    assert long is not None and len(long) <= 60 and long.endswith("…")


async def test_a_thread_started_over_ag_ui_is_titled_too(
    server_factory: Any, fake_llm: FakeLLM
) -> None:
    from tests.agui.test_agui import post, run_input

    fake_llm.script("title", text("Lisbon weather"))
    async with server_factory(**TITLES_ON) as srv:
        thread = "t-" + "a" * 20
        events = await post(srv.address, run_input(thread, QUESTION))  # stores the thread
        # The thread's session is named in the events' rawEvent, not by the thread id.
        session_id = next(e.raw_event["session_id"] for e in events if e.raw_event)
        async with await srv.client(session_id=session_id) as watcher:
            assert (await watcher.recv())["type"] == "session"
            async with httpx.AsyncClient(base_url=f"http://{srv.address}") as http:
                while (await http.get("/api/sessions")).json()["sessions"][0]["title"] != (
                    "Lisbon weather"
                ):
                    await watcher.until("session_title", timeout=5)
