"""SQLiteStore stores a group commit's events with a few statements, numbered on the event
loop, and falls back to numbering from the session row whenever that numbering is stale.

The statements are counted with the write connection's trace callback: the point of the
batching is how many SQLite steps the writer thread makes (each releases the GIL), which no
public method shows.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
from pathlib import Path

import orjson
import pytest

from agent.errors import StorageError
from server.storage.base import Scope
from server.storage.sqlite import SQLiteStore
from tests.storage.sqlite_trace import traced

ALICE = Scope("acme", "alice")
BOB = Scope("acme", "bob")


@pytest.fixture
def store(sqlite_store: SQLiteStore) -> SQLiteStore:
    return sqlite_store  # SQLite only here, not the per-backend `store` of conftest.py


async def _sessions(store: SQLiteStore, count: int) -> list[str]:
    ids = [f"s{i}" for i in range(count)]
    for session_id in ids:
        await store.create_session(ALICE, session_id, 100)
        await store.append_events(ALICE, session_id, [{"type": "first"}], 100)
    return ids


async def _seqs(store: SQLiteStore, scope: Scope, session_id: str) -> list[int]:
    return [orjson.loads(b)["seq"] for b in await store.read_events(scope, session_id, 0)]


async def test_a_batch_of_appends_is_one_transaction_of_a_few_statements(
    store: SQLiteStore,
) -> None:
    ids = await _sessions(store, 40)
    statements = await traced(store)
    appends = [
        store.append_events(ALICE, sid, [{"type": "x", "n": n} for n in range(3)], 200)
        for sid in ids
    ]
    results = await asyncio.gather(*appends)

    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    # Statements grow with the log of the batch, not with its events: at most one session
    # update per power of two of the sessions (32 + 8) and one insert per power of two of the
    # events (64 + 32 + 16 + 8), where one statement per event and session made 160. (The
    # trace repeats a statement's text for each row its trigger counts the bytes of: one
    # step still, in SQLite's own code.)
    events = 3 * len(ids)
    steps = [text for text, _ in itertools.groupby(statements)]
    assert len(steps) <= 2 + len(ids).bit_length() + events.bit_length()
    assert not any("SAVEPOINT" in s for s in statements)
    for sid, bodies in zip(ids, results, strict=True):
        assert [orjson.loads(b)["seq"] for b in bodies] == [2, 3, 4]
        assert await store.read_events(ALICE, sid, 1) == bodies


async def test_a_lone_append_of_numbered_events_is_one_statement(store: SQLiteStore) -> None:
    """A model streaming at its own pace: each delta is a batch of its own."""
    (sid,) = await _sessions(store, 1)
    statements = await traced(store)
    (body,) = await store.append_events(ALICE, sid, [{"type": "delta"}], 200)

    # One call into SQLite (the trace repeats its text for each statement of the trigger).
    assert len(set(statements)) == 1 and statements[0].startswith("INSERT INTO events_in_order")
    assert orjson.loads(body)["seq"] == 2
    assert await store.read_events(ALICE, sid, 1) == [body]
    record = await store.get_session(ALICE, sid)
    assert record is not None and (record.last_seq, record.updated_at) == (2, 200)


async def test_a_lone_append_in_another_scope_is_refused_and_stores_nothing(
    store: SQLiteStore,
) -> None:
    (sid,) = await _sessions(store, 1)
    with pytest.raises(StorageError, match="does not exist"):
        await store.append_events(BOB, sid, [{"type": "x"}], 200)  # numbered from ALICE's
    assert await _seqs(store, ALICE, sid) == [1]


async def test_appends_of_one_session_in_one_batch_stay_in_order(store: SQLiteStore) -> None:
    (sid,) = await _sessions(store, 1)
    results = await asyncio.gather(
        *(store.append_events(ALICE, sid, [{"type": "x", "n": n}], 200) for n in range(20))
    )

    assert [orjson.loads(b)["n"] for (b,) in results] == list(range(20))
    assert await _seqs(store, ALICE, sid) == list(range(1, 22))


async def test_another_writer_on_the_file_makes_the_next_batch_renumber(tmp_path: Path) -> None:
    store, other = (SQLiteStore(tmp_path / "db.sqlite", shared=True) for _ in range(2))
    await store.open()
    (sid,) = await _sessions(store, 1)
    await other.open()
    try:
        assert len(await other.append_events(ALICE, sid, [{"type": "o"}] * 3, 200)) == 3
        (body,) = await store.append_events(ALICE, sid, [{"type": "mine"}], 300)
        assert orjson.loads(body)["seq"] == 5  # not the 2 this store would have handed out
        (body,) = await store.append_events(ALICE, sid, [{"type": "mine"}], 300)
        assert orjson.loads(body)["seq"] == 6
    finally:
        await other.close()
    assert await _seqs(store, ALICE, sid) == [1, 2, 3, 4, 5, 6]
    await store.close()


async def test_one_refused_append_fails_alone_and_leaves_no_gap(store: SQLiteStore) -> None:
    ids = await _sessions(store, 3)
    await store.create_session(BOB, "bobs", 100)
    results = await asyncio.gather(
        store.append_events(ALICE, ids[0], [{"type": "x"}], 200),
        store.append_events(ALICE, "bobs", [{"type": "x"}], 200),  # not Alice's session
        store.append_events(ALICE, ids[0], [{"type": "y"}], 200),
        store.append_events(ALICE, ids[1], [{"type": "x"}], 200),
        return_exceptions=True,
    )

    assert isinstance(results[1], StorageError)
    assert [orjson.loads(r[0])["seq"] for r in results if isinstance(r, list)] == [2, 3, 2]
    assert await _seqs(store, ALICE, ids[0]) == [1, 2, 3]
    assert await store.read_events(BOB, "bobs", 0) == []
    await store.append_events(ALICE, ids[0], [{"type": "z"}], 300)
    assert await _seqs(store, ALICE, ids[0]) == [1, 2, 3, 4]


async def test_a_failed_batch_stores_nothing_and_numbering_resumes_without_a_gap(
    store: SQLiteStore,
) -> None:
    ids = await _sessions(store, 2)

    def read_only(on: bool) -> None:
        assert store._write_conn is not None
        store._write_conn.execute(f"PRAGMA query_only = {'ON' if on else 'OFF'}")

    await store._in_writer(read_only, True)
    failed = await asyncio.gather(
        *(store.append_events(ALICE, sid, [{"type": "lost"}], 200) for sid in ids),
        return_exceptions=True,
    )
    assert all(isinstance(r, StorageError) for r in failed)
    await store._in_writer(read_only, False)

    for sid in ids:
        (body,) = await store.append_events(ALICE, sid, [{"type": "kept"}], 300)
        assert orjson.loads(body)["seq"] == 2
        assert await _seqs(store, ALICE, sid) == [1, 2]


async def test_a_frame_that_is_not_json_uses_no_number(store: SQLiteStore) -> None:
    (sid,) = await _sessions(store, 1)
    with pytest.raises(StorageError, match="not JSON-serializable"):
        await store.append_events(ALICE, sid, [{"type": "x"}, {"type": object()}], 200)
    (body,) = await store.append_events(ALICE, sid, [{"type": "x"}], 300)
    assert orjson.loads(body)["seq"] == 2


async def test_a_deleted_session_numbers_from_one_again(store: SQLiteStore) -> None:
    (sid,) = await _sessions(store, 1)
    assert await store.delete_session(ALICE, sid, 150) == "deleted"
    with pytest.raises(StorageError, match="does not exist"):
        await store.append_events(ALICE, sid, [{"type": "x"}], 200)
    await store.create_session(ALICE, sid, 300)
    (body,) = await store.append_events(ALICE, sid, [{"type": "x"}], 300)
    assert orjson.loads(body)["seq"] == 1


async def test_numbers_of_the_least_recently_written_sessions_are_forgotten(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "NUMBERS_KEPT", 3)
    ids = await _sessions(store, 5)
    assert list(store._last_seq) == ids[-3:]  # a long-lived process keeps a bounded few
    await store.append_events(ALICE, ids[0], [{"type": "x"}, {"type": "y"}], 200)
    await store.append_events(ALICE, ids[0], [{"type": "z"}], 200)
    assert await _seqs(store, ALICE, ids[0]) == [1, 2, 3, 4]  # numbered from its row again
    assert list(store._last_seq) == [ids[3], ids[4], ids[0]]


def test_the_file_keeps_one_row_per_seq(tmp_path: Path) -> None:
    """The primary key stays the last safety net under the batching."""
    path = tmp_path / "db.sqlite"

    async def fill() -> None:
        store = SQLiteStore(path)
        await store.open()
        await store.create_session(ALICE, "s", 100)
        await store.append_events(ALICE, "s", [{"type": "x"}], 100)
        await store.close()

    asyncio.run(fill())
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO events VALUES ('s', 1, NULL, 0, x'00')")
    conn.close()


async def test_a_write_after_close_fails_instead_of_waiting_forever(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.open()
    await store.create_session(ALICE, "s", 100)
    await store.close()
    with pytest.raises(StorageError, match="closed"):
        await asyncio.wait_for(store.append_events(ALICE, "s", [{"type": "x"}], 200), 10)


async def test_the_writer_commits_what_was_queued_meanwhile_without_the_event_loop(
    store: SQLiteStore,
) -> None:
    """On a busy event loop, the writer must not sit idle until the loop takes a commit's
    results: it picks up what was queued during that commit by itself."""
    (sid,) = await _sessions(store, 1)
    in_first, release_first, renamed = threading.Event(), threading.Event(), threading.Event()

    def watch(statement: str) -> None:  # in the writer thread
        if statement.startswith("INSERT INTO events_in_order") and not in_first.is_set():
            in_first.set()
            release_first.wait(10)
        elif "title" in statement:
            renamed.set()

    await store._in_writer(lambda: store._write_conn.set_trace_callback(watch))  # type: ignore[union-attr]
    first = asyncio.ensure_future(store.append_events(ALICE, sid, [{"type": "x"}], 200))
    assert await asyncio.to_thread(in_first.wait, 10)
    second = asyncio.ensure_future(store.rename_session(ALICE, sid, "meanwhile"))
    await asyncio.sleep(0)  # one turn: the rename is queued while the append commits
    release_first.set()
    # The event loop is blocked from here until the rename is committed, or 10 s.
    committed_without_the_loop = renamed.wait(10)

    assert committed_without_the_loop
    assert [orjson.loads(b)["seq"] for b in await first] == [2] and await second
    record = await store.get_session(ALICE, sid)
    assert record is not None and record.title == "meanwhile"
