"""Session search (`search_sessions`, server/storage/search.py) on both backends: SQLite's
FTS5 index and MongoDB's text index (FerretDB, which has none, scans), the same answers."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from agent.messages import Message
from server.storage.search import excerpt
from server.storage.sqlite import SQLiteStore
from tests.storage.conftest import Backend

from .test_contract import ALICE, BOB, MALLORY

LISBON = "What is the weather in Lisbon today?"


async def _session(store: Any, scope: Any, session_id: str, now: int, *messages: Message) -> None:
    await store.create_session(scope, session_id, now, f"Chat {session_id}")
    if messages:
        await store.append_messages(scope, session_id, list(messages), now)


async def _conversations(store: Any) -> None:
    await _session(
        store,
        ALICE,
        "trip",
        1_000,
        Message("user", LISBON, run_id="r1"),
        Message("assistant", "I should call the weather tool.", phase="reason", run_id="r1"),
        Message("tool", '{"city": "Porto", "sky": "rain"}', tool_call_id="c1", run_id="r1"),
        Message("assistant", "It is **sunny** in Lisbon, 21 °C.", phase="final", run_id="r1"),
    )
    await _session(store, ALICE, "code", 2_000, Message("user", "Explain a hash map", run_id="r2"))
    await _session(store, BOB, "bobs", 3_000, Message("user", "Lisbon for Bob", run_id="r3"))
    await _session(store, MALLORY, "other", 4_000, Message("user", "Lisbon elsewhere", run_id="r4"))


async def test_search_finds_what_was_said_and_marks_it(store: Any) -> None:
    await _conversations(store)
    (hit,) = await store.search_sessions(ALICE, "lisbon weather", 10)
    assert hit.session.session_id == "trip"
    assert hit.snippet is not None and "Lisbon" in hit.snippet
    marked = [hit.snippet[a:b].casefold() for a, b in hit.highlights]
    assert "lisbon" in marked and "weather" in marked
    api = hit.to_api()
    assert api["session_id"] == "trip" and api["match"]["text"] == hit.snippet


async def test_search_only_reads_the_callers_messages_and_the_answers(store: Any) -> None:
    await _conversations(store)
    assert [h.session.session_id for h in await store.search_sessions(BOB, "lisbon", 10)] == [
        "bobs"
    ]
    assert await store.search_sessions(ALICE, "porto", 10) == []  # a tool result
    assert await store.search_sessions(ALICE, "should call", 10) == []  # working notes
    assert await store.search_sessions(ALICE, "", 10) == []
    assert await store.search_sessions(ALICE, "!?", 10) == []  # no words: nothing to look for


async def test_search_takes_the_last_word_as_a_prefix_and_titles_too(store: Any) -> None:
    await _conversations(store)
    hits = await store.search_sessions(ALICE, "lisb", 10)
    assert [h.session.session_id for h in hits] == ["trip"]
    await store.rename_session(ALICE, "code", "Hash maps in Lisbon")
    hits = await store.search_sessions(ALICE, "lisbon", 10)
    assert [h.session.session_id for h in hits] == ["code", "trip"]  # newest update first
    assert hits[0].snippet is None and hits[0].to_api()["match"] is None  # its title matched
    assert len(await store.search_sessions(ALICE, "lisbon", 1)) == 1


async def test_a_deleted_session_is_no_longer_found(store: Any) -> None:
    await _conversations(store)
    assert await store.delete_session(ALICE, "trip", 10_000) == "deleted"
    assert await store.search_sessions(ALICE, "sunny", 10) == []


async def test_a_file_written_before_search_existed_is_indexed_when_opened(
    backend: Backend,
) -> None:
    if backend.name != "sqlite":
        pytest.skip("MongoDB indexes existing documents itself")
    first = SQLiteStore(backend.settings.sqlite_path, shared=True)
    await first.open()
    await _conversations(first)
    await first.close()
    with sqlite3.connect(backend.settings.sqlite_path) as conn:  # as an older version left it
        for table in ("search_docs", "search_text", "search_backfill"):
            conn.execute(f"DELETE FROM {table}")
    again = SQLiteStore(backend.settings.sqlite_path, shared=True)
    await again.open()
    try:
        hits = await again.search_sessions(ALICE, "sunny", 10)
        assert [h.session.session_id for h in hits] == ["trip"]
        assert await again.search_sessions(ALICE, "porto", 10) == []
    finally:
        await again.close()


def test_an_excerpt_starts_at_a_word_and_marks_every_match() -> None:
    text = "word " * 40 + "the Lisbon forecast says Lisbon stays sunny " + "end " * 40
    snippet, marks = excerpt(text, ["lisbon"])
    assert snippet.startswith("…word ") and snippet.endswith("…")
    assert [snippet[a:b] for a, b in marks] == ["Lisbon", "Lisbon"]
