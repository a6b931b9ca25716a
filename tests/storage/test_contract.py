"""The storage contract (`server/storage/base.py`), run against every backend.

Each test gets a fresh SQLite file or MongoDB database (see conftest.py). Backend-specific
failure modes (a database that goes away, a read-only file) are at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import sqlite3
import stat
import sys
import tempfile
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pymongo
import pytest

from agent.errors import StorageError
from agent.messages import Message, ToolCall
from server.settings import StorageSettings
from server.storage.base import (
    SLOT_GRACE_MS,
    Control,
    Cursor,
    Lease,
    Scope,
    SessionStatus,
    StatusChange,
    Store,
    UnfinishedRun,
    message_to_api,
)
from server.storage.mongo import MongoStore
from server.storage.sqlite import SQLiteStore
from tests.fakes.ferretdb import FerretDB, free_port
from tests.storage.conftest import Backend

T = TypeVar("T")

ALICE = Scope("acme", "alice")
BOB = Scope("acme", "bob")  # same tenant, other user
MALLORY = Scope("globex", "alice")  # other tenant, same user name
REPO = Path(__file__).resolve().parents[2]


def frame(i: int, run_id: str = "run-1", **extra: Any) -> dict[str, Any]:
    return {
        "type": "agent_update",
        "update_type": "agent_reason_delta",
        "session_id": "s1",
        "run_id": run_id,
        "seq": 0,
        "ts": 1_000 + i,
        "step": 1,
        "delta": f"token {i}",
        **extra,
    }


def seqs(bodies: list[bytes]) -> list[int]:
    return [orjson.loads(b)["seq"] for b in bodies]


async def new_session(store: Store, sid: str = "s1", scope: Scope = ALICE, now: int = 100) -> None:
    await store.create_session(scope, sid, now)


# -- sessions ----------------------------------------------------------------------------------


async def test_create_then_get_returns_the_same_record(store: Store) -> None:
    created = await store.create_session(ALICE, "s1", 123)

    assert await store.get_session(ALICE, "s1") == created
    assert (created.status, created.title, created.last_seq) == ("idle", "", 0)
    assert (created.created_at, created.updated_at) == (123, 123)
    assert (created.active_run_id, created.pending_input) == (None, None)
    assert await store.get_session(ALICE, "missing") is None


async def test_a_session_created_with_a_title_has_it(store: Store) -> None:
    created = await store.create_session(ALICE, "s1", 123, title="What time is it?")

    assert created.title == "What time is it?"
    assert await store.get_session(ALICE, "s1") == created


async def test_duplicate_session_id_is_refused_even_from_another_scope(store: Store) -> None:
    await new_session(store)
    for scope in (ALICE, MALLORY):
        with pytest.raises(StorageError):
            await store.create_session(scope, "s1", 999)

    record = await store.get_session(ALICE, "s1")
    assert record is not None and record.created_at == 100
    assert await store.get_session(MALLORY, "s1") is None


async def test_list_sessions_newest_update_first_with_limit(store: Store) -> None:
    for i, sid in enumerate(["s1", "s2", "s3"]):
        await new_session(store, sid, now=100 * (i + 1))
    await new_session(store, "bobs", BOB, now=900)
    await store.append_events(ALICE, "s2", [frame(1), frame(2)], 350)  # appending updates too
    await store.update_session(ALICE, "s1", 400, title="renamed")

    listed = await store.list_sessions(ALICE, 10)
    assert [(s.session_id, s.updated_at, s.last_seq) for s in listed] == [
        ("s1", 400, 0),
        ("s2", 350, 2),
        ("s3", 300, 0),
    ]
    assert listed[0].title == "renamed"
    assert [s.session_id for s in await store.list_sessions(ALICE, 2)] == ["s1", "s2"]
    assert await store.list_sessions(ALICE, 0) == []
    assert await store.list_sessions(MALLORY, 10) == []


@pytest.mark.parametrize("other", [BOB, MALLORY], ids=["other-user", "other-tenant"])
async def test_another_scope_can_neither_see_nor_change_a_session(
    store: Store, other: Scope
) -> None:
    await new_session(store)
    await store.append_events(ALICE, "s1", [frame(1)], 200)
    await store.append_messages(ALICE, "s1", [Message("user", "secret")], 200)

    assert await store.get_session(other, "s1") is None
    assert await store.list_sessions(other, 10) == []
    assert await store.read_events(other, "s1", 0) == []
    assert await store.read_messages(other, "s1", 10, None) == ([], 0)
    assert await store.load_history(other, "s1") == []
    with pytest.raises(StorageError):
        await store.append_events(other, "s1", [frame(2)], 300)
    with pytest.raises(StorageError):
        await store.append_messages(other, "s1", [Message("user", "injected")], 300)
    await store.update_session(other, "s1", 300, status="running", title="x", active_run_id="r")

    record = await store.get_session(ALICE, "s1")
    assert record is not None
    assert (record.status, record.title, record.updated_at, record.last_seq) == ("idle", "", 200, 1)
    assert seqs(await store.read_events(ALICE, "s1", 0)) == [1]
    assert [m.content for m in await store.load_history(ALICE, "s1")] == ["secret"]


async def test_rename_session_keeps_its_place_and_is_scoped(store: Store) -> None:
    await new_session(store, "s1", now=100)
    await new_session(store, "s2", now=200)

    assert await store.rename_session(ALICE, "s1", "Trip to Rome") is True
    assert await store.rename_session(BOB, "s1", "stolen") is False
    assert await store.rename_session(MALLORY, "s1", "stolen") is False
    assert await store.rename_session(ALICE, "missing", "x") is False

    listed = await store.list_sessions(ALICE, 10)
    assert [(s.session_id, s.title, s.updated_at) for s in listed] == [
        ("s2", "", 200),
        ("s1", "Trip to Rome", 100),
    ]


async def test_delete_session_removes_its_events_and_messages_only(store: Store) -> None:
    for sid in ("s1", "s2"):
        await new_session(store, sid)
        await store.append_events(ALICE, sid, [frame(1), frame(2)], 200)
        await store.append_messages(ALICE, sid, [Message("user", f"hi {sid}")], 200)

    assert await store.delete_session(BOB, "s1", 300) == "not_found"
    assert await store.delete_session(MALLORY, "s1", 300) == "not_found"
    assert seqs(await store.read_events(ALICE, "s1", 0)) == [1, 2]
    assert await store.delete_session(ALICE, "s1", 300) == "deleted"

    assert await store.get_session(ALICE, "s1") is None
    assert [s.session_id for s in await store.list_sessions(ALICE, 10)] == ["s2"]
    assert await store.read_events(ALICE, "s1", 0) == []
    assert await store.read_messages(ALICE, "s1", 10, None) == ([], 0)
    assert await store.load_history(ALICE, "s1") == []
    assert await store.delete_session(ALICE, "s1", 300) == "not_found"
    assert seqs(await store.read_events(ALICE, "s2", 0)) == [1, 2]
    assert [m.content for m in await store.load_history(ALICE, "s2")] == ["hi s2"]
    with pytest.raises(StorageError):  # a deleted session takes no more writes
        await store.append_events(ALICE, "s1", [frame(3)], 300)


async def test_delete_refuses_a_session_a_run_holds_and_keeps_everything(store: Store) -> None:
    """A run holds its session from taking the slot (status still idle: a run starting in
    another process) until its end is stored; a delete meanwhile deletes nothing."""
    await new_session(store)
    await store.append_events(ALICE, "s1", [frame(1)], 200)
    assert await store.take_run_slot(ALICE, "s1", "run-1", 3, 1000) is None
    assert await store.delete_session(ALICE, "s1", 1500) == "run_in_progress"
    await store.update_session(ALICE, "s1", 1600, status="running", active_run_id="run-1")
    assert await store.delete_session(ALICE, "s1", 1700) == "run_in_progress"
    assert seqs(await store.read_events(ALICE, "s1", 0)) == [1]

    await store.update_session(ALICE, "s1", 1800, status="idle")  # the run ended
    assert await store.delete_session(ALICE, "s1", 1900) == "deleted"
    assert await store.take_run_slot(ALICE, "s1", "run-2", 3, 2000) is None  # nothing left over


async def test_a_slot_left_by_a_dead_process_does_not_block_a_delete(store: Store) -> None:
    await new_session(store)
    assert await store.take_run_slot(ALICE, "s1", "run-1", 3, 1000) is None  # never ended
    assert await store.delete_session(ALICE, "s1", 1000 + SLOT_GRACE_MS + 1) == "deleted"


def _raw_status(backend: Backend, session_id: str) -> object:
    """The status as the backend stored it, read past the store."""
    if backend.name == "sqlite":
        path = backend.settings.sqlite_path
        with contextlib.closing(sqlite3.connect(path)) as db:
            (value,) = db.execute(
                "SELECT status FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return value
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        backend.settings.mongodb_uri, serverSelectionTimeoutMS=5000
    )
    with client:
        doc = client[backend.settings.mongodb_database]["sessions"].find_one(
            {"session_id": session_id}
        )
    assert doc is not None
    return doc["status"]


async def test_every_status_is_stored_and_read_back_as_its_plain_string(
    backend: Backend, store: Store
) -> None:
    await new_session(store)
    assert _raw_status(backend, "s1") == "idle"
    for status in SessionStatus:
        await store.update_session(ALICE, "s1", 200, status=status, active_run_id="r1")
        raw = _raw_status(backend, "s1")
        assert type(raw) is str and raw == status.value, (status, raw)
        record = await store.get_session(ALICE, "s1")
        assert record is not None
        assert type(record.status) is SessionStatus and record.status is status
        assert record.to_api()["status"] == status.value
        assert json.loads(json.dumps(record.to_api()))["status"] == status.value
        assert orjson.loads(orjson.dumps(record.to_api()))["status"] == status.value
    await store.store_batch(
        ALICE, "s1", 300, status=StatusChange(SessionStatus.AWAITING_INPUT, "r1", {"q": 1}, 900)
    )
    assert _raw_status(backend, "s1") == "awaiting_input"


async def test_update_session_sets_status_run_and_pending_input_together(store: Store) -> None:
    await new_session(store)
    await new_session(store, "other-tenant", MALLORY)
    pending = {"question": "Which city?", "tool_call_id": "c1", "step": 2, "expires_at": 9}

    await store.update_session(ALICE, "s1", 200, status="running", active_run_id="r1")
    await store.update_session(MALLORY, "other-tenant", 200, status="running", active_run_id="r9")
    record = await store.get_session(ALICE, "s1")
    assert record is not None
    assert (record.status, record.active_run_id, record.pending_input) == ("running", "r1", None)
    assert sorted(await store.unfinished_runs(), key=lambda r: r.run_id) == [
        UnfinishedRun(ALICE, "s1", "r1"),
        UnfinishedRun(MALLORY, "other-tenant", "r9"),
    ]

    await store.update_session(
        ALICE, "s1", 300, status="awaiting_input", active_run_id="r1", pending_input=pending
    )
    await store.update_session(ALICE, "s1", 310, title="Weather")  # no status: rest kept
    record = await store.get_session(ALICE, "s1")
    assert record is not None
    assert (record.status, record.active_run_id, record.pending_input) == (
        "awaiting_input",
        "r1",
        pending,
    )
    assert (record.title, record.updated_at) == ("Weather", 310)

    await store.update_session(ALICE, "s1", 400, status="idle")  # clears run and question
    record = await store.get_session(ALICE, "s1")
    assert record is not None
    assert (record.status, record.active_run_id, record.pending_input) == ("idle", None, None)
    assert record.title == "Weather"
    assert await store.unfinished_runs() == [UnfinishedRun(MALLORY, "other-tenant", "r9")]


async def test_a_lease_renewal_never_undoes_a_run_ending_at_the_same_moment(
    store: Store,
) -> None:
    """A process renews its runs' leases while one of them ends. On FerretDB 1.x an update is
    read-then-replace, so a renewal overlapping the status change could write "running" back
    over "idle" (a finished run left active, later "recovered" a second time)."""
    for i in range(30):
        sid = f"s{i}"
        await new_session(store, sid)
        await store.update_session(
            ALICE, sid, 100, status="running", active_run_id="r1", lease_until=5_000
        )
        held = [Lease(sid, "r1", 5_000)]
        await asyncio.gather(
            store.renew_leases(held, 10_000),
            store.update_session(ALICE, sid, 200, status="idle"),
            store.renew_leases(held, 10_000),
        )
        record = await store.get_session(ALICE, sid)
        assert record is not None
        assert (i, record.status, record.active_run_id) == (i, "idle", None)


async def test_a_lease_is_renewed_only_by_the_process_that_gave_it(store: Store) -> None:
    """A renewal names the run and the latest lease its process gave it: once the lease ran
    out and another process claimed the run (a later lease) or closed it, the renewal
    changes nothing and says so, so a paused process learns it lost the run."""
    await new_session(store, "s1")
    await store.update_session(
        ALICE, "s1", 100, status="running", active_run_id="r1", lease_until=1_000
    )
    mine = Lease("s1", "r1", 1_000)
    assert await store.renew_leases([mine, Lease("s1", "r0", 1_000)], 2_000) == {"s1"}
    assert await store.renew_leases([Lease("s1", "r1", 2_000)], 3_000) == {"s1"}
    item = UnfinishedRun(ALICE, "s1", "r1")
    assert await store.claim_run(item, 3_500, 9_000)  # ours ran out at 3,000: taken
    assert await store.renew_leases([Lease("s1", "r1", 3_000)], 4_000) == set()
    record = await store.get_session(ALICE, "s1")
    assert record is not None and await store.unfinished_runs(8_999) == []  # still the claim's
    await store.update_session(ALICE, "s1", 9_100, status="idle")
    assert await store.renew_leases([Lease("s1", "r1", 9_000)], 10_000) == set()


async def test_a_rename_at_the_moment_a_run_ends_keeps_both(store: Store) -> None:
    """A title changed (PATCH) while the run's last status change is being stored: on
    FerretDB 1.x either write could put back what the other replaced."""
    for i in range(30):
        sid = f"s{i}"
        await new_session(store, sid)
        await store.update_session(ALICE, sid, 100, status="running", active_run_id="r1")
        await asyncio.gather(
            store.rename_session(ALICE, sid, "Renamed"),
            store.update_session(ALICE, sid, 200, status="idle"),
        )
        record = await store.get_session(ALICE, sid)
        assert record is not None
        assert (i, record.status, record.title) == (i, "idle", "Renamed")


# -- events ------------------------------------------------------------------------------------


async def test_event_seqs_are_consecutive_and_replay_is_byte_identical(store: Store) -> None:
    await new_session(store)
    sent: list[bytes] = []
    batches = [
        [frame(1)],
        [frame(i) for i in range(2, 5)],
        [frame(i, "run-2") for i in range(5, 10)],
    ]
    for batch in batches:
        bodies = await store.append_events(ALICE, "s1", batch, 200)
        assert bodies == [orjson.dumps(f) for f in batch]  # "seq" was set in place
        sent += bodies

    assert seqs(sent) == list(range(1, 10))
    assert await store.read_events(ALICE, "s1", 0) == sent
    record = await store.get_session(ALICE, "s1")
    assert record is not None and record.last_seq == 9
    assert await store.append_events(ALICE, "s1", [], 300) == []
    assert seqs(await store.append_events(ALICE, "s1", [frame(10)], 300)) == [10]


async def test_read_events_after_seq_and_limit(store: Store) -> None:
    await new_session(store)
    await store.append_events(ALICE, "s1", [frame(i) for i in range(10)], 200)

    assert seqs(await store.read_events(ALICE, "s1", 3)) == list(range(4, 11))
    assert seqs(await store.read_events(ALICE, "s1", 3, limit=2)) == [4, 5]
    assert seqs(await store.read_events(ALICE, "s1", 8, limit=5)) == [9, 10]
    assert seqs(await store.read_events(ALICE, "s1", 0, limit=None)) == list(range(1, 11))
    assert await store.read_events(ALICE, "s1", 0, limit=0) == []
    assert await store.read_events(ALICE, "s1", 10) == []
    assert await store.read_events(ALICE, "s1", 99) == []
    assert await store.read_events(ALICE, "missing", 0) == []


async def test_read_events_ends_a_page_past_max_bytes(store: Store) -> None:
    """A replay reads in pages bounded by bytes too: large events must not make a page of
    hundreds of megabytes. The frame that crosses the bound ends the page (never an empty one)."""
    await new_session(store)
    sent = await store.append_events(ALICE, "s1", [frame(i) for i in range(10)], 200)
    first, second = len(sent[0]), len(sent[1])

    assert await store.read_events(ALICE, "s1", 0, max_bytes=1) == sent[:1]
    assert await store.read_events(ALICE, "s1", 0, max_bytes=first) == sent[:2]
    assert await store.read_events(ALICE, "s1", 0, max_bytes=first + second + 1) == sent[:3]
    assert await store.read_events(ALICE, "s1", 2, limit=2, max_bytes=10**6) == sent[2:4]
    assert await store.read_events(ALICE, "s1", 0, max_bytes=10**6) == sent
    assert await store.read_events(ALICE, "s1", 10, max_bytes=1) == []


async def test_a_frame_that_is_not_json_fails_without_using_a_seq(store: Store) -> None:
    await new_session(store)
    with pytest.raises(StorageError):
        await store.append_events(ALICE, "s1", [frame(1, delta="\ud800")], 200)  # lone surrogate

    assert seqs(await store.append_events(ALICE, "s1", [frame(2)], 200)) == [1]
    assert seqs(await store.read_events(ALICE, "s1", 0)) == [1]


async def test_a_batch_stores_its_events_then_messages_then_status_change(store: Store) -> None:
    await new_session(store)
    asked = {"question": "Which city?", "input_id": "in-1"}
    bodies = await store.store_batch(
        ALICE,
        "s1",
        200,
        frames=[frame(1), frame(2)],
        messages=[Message("user", "hello", run_id="run-1")],
        status=StatusChange("awaiting_input", "run-1", asked, 5_000),
    )

    assert seqs(bodies) == [1, 2] and await store.read_events(ALICE, "s1", 0) == bodies
    assert [m.content for m in await store.load_history(ALICE, "s1")] == ["hello"]
    record = await store.get_session(ALICE, "s1")
    assert record is not None
    assert (record.status, record.active_run_id, record.pending_input, record.last_seq) == (
        "awaiting_input",
        "run-1",
        asked,
        2,
    )
    assert await store.store_batch(ALICE, "s1", 300, status=StatusChange("idle")) == []
    assert await store.store_batch(ALICE, "s1", 300) == []
    record = await store.get_session(ALICE, "s1")
    assert record is not None and (record.status, record.pending_input) == ("idle", None)
    assert seqs(await store.store_batch(ALICE, "s1", 400, frames=[frame(3)])) == [3]


# -- messages ----------------------------------------------------------------------------------


async def test_read_messages_last_n_first_n_since_and_total(store: Store) -> None:
    await new_session(store)
    for now, names in [(100, "abcd"), (200, "efg"), (300, "hij")]:
        await store.append_messages(ALICE, "s1", [Message("user", n) for n in names], now)

    everything, total = await store.read_messages(ALICE, "s1", 100, None)
    assert [m["content"] for m in everything] == list("abcdefghij")
    assert [m["sequence"] for m in everything] == list(range(10))
    assert [m["ts"] for m in everything] == [100] * 4 + [200] * 3 + [300] * 3
    assert len({m["message_id"] for m in everything}) == 10
    assert total == 10

    last, total = await store.read_messages(ALICE, "s1", 3, None)
    assert ([m["content"] for m in last], total) == (list("hij"), 10)
    first_after, total = await store.read_messages(ALICE, "s1", 2, 100)
    assert ([m["content"] for m in first_after], total) == (list("ef"), 10)
    rest, _ = await store.read_messages(ALICE, "s1", 100, 200)
    assert [m["content"] for m in rest] == list("hij")
    assert await store.read_messages(ALICE, "s1", 10, 300) == ([], 10)
    assert await store.read_messages(ALICE, "s1", 0, None) == ([], 10)


async def test_read_messages_stops_past_max_bytes_from_the_end_it_starts_at(
    store: Store,
) -> None:
    """A session of large messages is read a bounded number of bytes at a time: the last
    ones without `since`, the first ones after it, each set ending with the one that passes
    the bound."""
    await new_session(store)
    big = [Message("user", f"{n}" + "x" * 1000) for n in range(10)]
    await store.append_messages(ALICE, "s1", big, 100)
    last, total = await store.read_messages(ALICE, "s1", 500, None, max_bytes=2_500)
    assert [m["content"][0] for m in last] == ["7", "8", "9"] and total == 10
    first, _ = await store.read_messages(ALICE, "s1", 500, 0, max_bytes=2_500)
    assert [m["content"][0] for m in first] == ["0", "1", "2"]
    whole, _ = await store.read_messages(ALICE, "s1", 500, None)
    assert len(whole) == 10


async def test_history_round_trips_every_message_field(store: Store) -> None:
    await new_session(store)
    calls = (
        ToolCall("call_1", "get_current_time", '{"timezone": "Asia/Tokyo"}'),
        ToolCall("call_2", "lookup", "{}"),
    )
    history = [
        Message("system", "You are helpful."),
        Message("user", "What time is it in Tokyo?", run_id="r1"),
        Message("assistant", "Let me check.", tool_calls=calls, phase="act", run_id="r1"),
        Message(
            "tool",
            '"12:00"',
            tool_call_id="call_1",
            tool_name="get_current_time",
            status="ok",
            run_id="r1",
        ),
        Message(
            "tool",
            "",
            tool_call_id="call_2",
            tool_name="lookup",
            status="error",
            error="no such thing",
            run_id="r1",
        ),
        Message("assistant", "It is noon.", phase="final", run_id="r1"),
    ]
    await store.append_messages(ALICE, "s1", history[:2], 200)
    await store.append_messages(ALICE, "s1", history[2:], 201)

    assert await store.load_history(ALICE, "s1") == history
    api, total = await store.read_messages(ALICE, "s1", 10, None)
    assert total == 6
    for body, message in zip(api, history, strict=True):
        expected = message_to_api(message, body["message_id"], body["sequence"], body["ts"])
        assert body == expected
    assert "tool_calls" not in api[0] and "phase" not in api[0]


# -- content -----------------------------------------------------------------------------------


async def test_unicode_and_one_megabyte_content_round_trip(store: Store) -> None:
    await new_session(store)
    text = "漢字かな交じり文 — 你好，世界 — 한국어 — 🚀👩🏽‍💻🇯🇵 — e\u0301 — \u0000 — \"'\\"
    big = ("0123456789abcdef" * 65_536) + "🎉"  # a bit over 1 MiB
    frames = [frame(1, delta=text), frame(2, delta=big)]

    bodies = await store.append_events(ALICE, "s1", frames, 200)
    await store.append_messages(
        ALICE, "s1", [Message("user", text), Message("assistant", big)], 200
    )

    assert await store.read_events(ALICE, "s1", 0) == bodies
    assert [orjson.loads(b)["delta"] for b in bodies] == [text, big]
    assert [m.content for m in await store.load_history(ALICE, "s1")] == [text, big]


# -- durability and concurrency ----------------------------------------------------------------


async def test_data_survives_a_restart_and_numbering_continues(backend: Backend) -> None:
    first = backend.new_store()
    await first.open()
    await new_session(first)
    sent = await first.append_events(ALICE, "s1", [frame(i) for i in range(5)], 200)
    await first.append_messages(ALICE, "s1", [Message("user", str(i)) for i in range(3)], 200)
    await first.update_session(ALICE, "s1", 300, status="running", active_run_id="r1")
    await first.close()

    second = backend.new_store()
    await second.open()
    try:
        record = await second.get_session(ALICE, "s1")
        assert record is not None
        assert (record.last_seq, record.status, record.active_run_id) == (5, "running", "r1")
        assert await second.read_events(ALICE, "s1", 0) == sent
        assert await second.unfinished_runs() == [UnfinishedRun(ALICE, "s1", "r1")]
        assert seqs(await second.append_events(ALICE, "s1", [frame(6)], 400)) == [6]
        await second.append_messages(ALICE, "s1", [Message("user", "3")], 400)
        messages, total = await second.read_messages(ALICE, "s1", 10, None)
        assert [m["sequence"] for m in messages] == [0, 1, 2, 3] and total == 4
    finally:
        await second.close()


async def test_two_store_instances_taking_turns_continue_each_others_numbering(
    backend: Backend, store: Store
) -> None:
    other = backend.new_store()  # as a second server process would hold
    await other.open()
    try:
        await new_session(store)
        turns = [(store, 2), (other, 3), (store, 1), (other, 1)]
        appended = [
            await s.append_events(ALICE, "s1", [frame(i) for i in range(n)], 200) for s, n in turns
        ]
        for s in (store, other, store):
            await s.append_messages(ALICE, "s1", [Message("user", "hi")], 200)

        assert [seqs(bodies) for bodies in appended] == [[1, 2], [3, 4, 5], [6], [7]]
        assert await other.read_events(ALICE, "s1", 0) == [b for bs in appended for b in bs]
        for s in (store, other):
            record = await s.get_session(ALICE, "s1")
            assert record is not None and record.last_seq == 7
            messages, total = await s.read_messages(ALICE, "s1", 10, None)
            assert [m["sequence"] for m in messages] == [0, 1, 2] and total == 3
    finally:
        await other.close()


_APPEND_WORKER = r"""
import asyncio, json, sys
from server.settings import StorageSettings
from server.storage.base import Scope

async def main(config):
    settings = StorageSettings.model_validate(config["settings"])
    if settings.backend == "sqlite":
        from server.storage.sqlite import SQLiteStore
        store = SQLiteStore(settings.sqlite_path, shared=settings.is_shared)
    else:
        from server.storage.mongo import MongoStore
        store = MongoStore(settings)
    await store.open()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # "go"
    done, batch = 0, 0
    while done < config["count"]:
        size = min(batch % 3 + 1, config["count"] - done)  # batches of 1, 2 and 3
        frames = [{"seq": 0, "writer": config["writer"], "i": done + k} for k in range(size)]
        await store.append_events(Scope(*config["scope"]), "s1", frames, 200)
        done, batch = done + size, batch + 1
    await store.close()

asyncio.run(main(json.loads(sys.argv[1])))
"""


async def test_two_processes_appending_to_one_session_get_unique_consecutive_seqs(
    backend: Backend, store: Store
) -> None:
    await new_session(store)
    count = 200
    workers = []
    for writer in ("a", "b"):
        config = {
            "settings": backend.settings.model_dump(mode="json"),
            "writer": writer,
            "count": count,
            "scope": [ALICE.tenant_id, ALICE.user_id],
        }
        workers.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _APPEND_WORKER,
                json.dumps(config),
                cwd=REPO,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        )
    try:
        async with asyncio.timeout(60):
            for worker in workers:  # both connected before either writes: they overlap
                assert worker.stdout is not None and worker.stderr is not None
                assert await worker.stdout.readline() == b"ready\n", await worker.stderr.read()
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write(b"go\n")
                await worker.stdin.drain()
            for worker in workers:
                _, err = await worker.communicate()
                assert worker.returncode == 0, err.decode()
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.kill()
                await worker.wait()

    events = [orjson.loads(b) for b in await store.read_events(ALICE, "s1", 0)]
    assert [e["seq"] for e in events] == list(range(1, 2 * count + 1))
    for writer in ("a", "b"):
        assert [e["i"] for e in events if e["writer"] == writer] == list(range(count))
    record = await store.get_session(ALICE, "s1")
    assert record is not None and record.last_seq == 2 * count


async def test_a_failing_write_does_not_fail_a_concurrent_one(
    backend: Backend, store: Store
) -> None:
    await new_session(store, "s1")
    await new_session(store, "s2")

    duplicate, appended = await asyncio.gather(
        store.create_session(ALICE, "s1", 300),
        store.append_events(ALICE, "s2", [frame(1)], 300),
        return_exceptions=True,
    )

    assert isinstance(duplicate, StorageError)
    assert isinstance(appended, list) and seqs(appended) == [1]


# -- failures ----------------------------------------------------------------------------------


async def test_operations_before_open_raise_storage_error(backend: Backend) -> None:
    unopened = backend.new_store()
    with pytest.raises(StorageError):
        await unopened.get_session(ALICE, "s1")


@pytest.mark.parametrize("name", ["sqlite", "mongodb"])
async def test_an_unusable_location_fails_open_quickly_with_storage_error(
    name: str, tmp_path: Path
) -> None:
    if name == "sqlite":
        store: Store = SQLiteStore(tmp_path)  # a directory, not a database file
    else:
        uri = f"mongodb://127.0.0.1:{free_port()}"  # nothing listens there
        store = MongoStore(
            StorageSettings(backend="mongodb", mongodb_uri=uri, mongodb_timeout_ms=300)
        )
    try:
        with pytest.raises(StorageError) as failed:
            await store.open()
    finally:
        await store.close()
        collect_pymongo_monitor_sockets()
    if name == "mongodb":
        assert gave_up_within(failed.value, 300)


def gave_up_within(error: StorageError, timeout_ms: int) -> bool:
    """Whether the driver gave up on `mongodb_timeout_ms`, not on its own defaults (30 s).

    pymongo's message (the StorageError's cause) names the timeouts it ran with, e.g.
    "(configured timeouts: timeoutMS: 500.0ms, connectTimeoutMS: 500.0ms)"."""
    cause = error.__cause__
    configured = re.findall(r"(?:\w+TimeoutMS|timeoutMS): ([\d.]+)ms", str(cause))
    return (
        isinstance(cause, pymongo.errors.ConnectionFailure)
        and bool(configured)
        and all(float(ms) == timeout_ms for ms in configured)
    )


def collect_pymongo_monitor_sockets() -> None:
    """Collect the socket pymongo leaks when a client closes while its monitor connects.

    pymongo 4.20's `_async_create_connection` closes its socket on OSError but not on
    CancelledError, and `close()` cancels the monitor task; the socket's __del__ then warns,
    in whichever later test the garbage collector runs. Collect it here, where it is known.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "unclosed <socket", ResourceWarning)
        gc.collect()


async def eventually(op: Callable[[], Awaitable[T]], timeout: float = 15) -> T:
    """Retry `op` until it stops raising StorageError (as a client would), within `timeout`."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                return await op()
            except StorageError:
                await asyncio.sleep(0.05)


async def test_mongodb_going_down_raises_storage_error_then_recovers(
    ferretdb_bin: Path, tmp_path: Path
) -> None:
    server = FerretDB(ferretdb_bin, tmp_path / "ferretdb")
    await asyncio.to_thread(server.start)
    store = MongoStore(
        StorageSettings(
            backend="mongodb",
            mongodb_uri=server.uri,
            mongodb_database="downtime",
            mongodb_timeout_ms=500,
            outage_tolerance_s=0,  # no riding through: tests/reliability/test_store_outages.py
        )
    )
    try:
        await store.open()
        await new_session(store)
        sent = await store.append_events(ALICE, "s1", [frame(i) for i in range(3)], 200)

        await asyncio.to_thread(server.kill)
        for operation in (
            lambda: store.append_events(ALICE, "s1", [frame(3)], 300),
            lambda: store.read_events(ALICE, "s1", 0),
            lambda: store.get_session(ALICE, "s1"),
        ):
            with pytest.raises(StorageError) as failed:
                await operation()
            assert gave_up_within(failed.value, 500)

        await asyncio.to_thread(server.start)  # same port, same data
        assert await eventually(lambda: store.read_events(ALICE, "s1", 0)) == sent
        assert seqs(await store.append_events(ALICE, "s1", [frame(4)], 400)) == [4]
    finally:
        await store.close()
        await asyncio.to_thread(server.stop)
        collect_pymongo_monitor_sockets()


_READ_ONLY_WORKER = r"""
import asyncio, ctypes, json, os, sys
from pathlib import Path
from agent.errors import StorageError
from server.storage.base import Scope
from server.storage.sqlite import SQLiteStore

if os.geteuid() == 0:
    # Root ignores file modes. In a new user namespace root-owned files belong to "someone
    # else", so the modes apply. It must happen before any thread starts.
    if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:  # CLONE_NEWUSER
        print(json.dumps({"skip": os.strerror(ctypes.get_errno())}))
        sys.exit(0)

async def main(path):
    store = SQLiteStore(path)
    try:
        await store.open()
        result = {"open": "succeeded"}
        await store.close()
    except StorageError as exc:
        result = {"open": "StorageError", "why": str(exc)}
    print(json.dumps(result))

asyncio.run(main(Path(sys.argv[1])))
"""


async def test_sqlite_refuses_to_open_a_file_it_may_read_but_not_write() -> None:
    """SQLite opens such a file read-only without a word, and every write would fail: the
    store finds out at open, so the server does not start and report itself healthy."""
    with tempfile.TemporaryDirectory() as folder:  # not tmp_path: its parents are 0700
        os.chmod(folder, 0o755)
        path = Path(folder) / "agent.db"
        setup = SQLiteStore(path)
        await setup.open()
        await new_session(setup)
        await setup.close()
        os.chmod(path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)

        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _READ_ONLY_WORKER,
            str(path),
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(30):
            out, err = await worker.communicate()
    assert worker.returncode == 0, err.decode()
    result = json.loads(out)
    if "skip" in result:
        pytest.skip(f"running as root and cannot drop privileges: {result['skip']}")
    assert result["open"] == "StorageError"
    assert "readonly database" in result["why"] and str(path) in result["why"]


# -- several processes: tail, controls, run slots ---------------------------------------------


async def test_tail_events_returns_what_follows_each_cursor_in_order(store: Store) -> None:
    for sid in ("s1", "s2", "s3"):
        await new_session(store, sid)
        await store.append_events(ALICE, sid, [frame(i) for i in range(4)], 200)
    rows = await store.tail_events(
        {"s1": Cursor(ALICE, 2), "s2": Cursor(ALICE, 0), "s3": Cursor(ALICE, 4)}, 100
    )
    assert [(sid, seq) for sid, seq, _ in rows] == [("s1", 3), ("s1", 4)] + [
        ("s2", n) for n in range(1, 5)
    ]
    assert rows[0][2] == (await store.read_events(ALICE, "s1", 2, 1))[0]
    cut = await store.tail_events({"s1": Cursor(ALICE, 0), "s2": Cursor(ALICE, 0)}, 3)
    assert [(sid, seq) for sid, seq, _ in cut] == [("s1", 1), ("s1", 2), ("s1", 3)]


async def test_a_session_made_again_by_someone_else_is_neither_tailed_nor_existing(
    store: Store,
) -> None:
    """A follower of a deleted session must not be handed the events of the session another
    user makes next under its id (an AG-UI thread id is the client's to choose)."""
    await new_session(store, "shared-name")
    await store.append_events(ALICE, "shared-name", [frame(0)], 200)
    assert await store.delete_session(ALICE, "shared-name", 250) == "deleted"
    await store.create_session(BOB, "shared-name", 300)
    await store.append_events(BOB, "shared-name", [frame(i) for i in range(3)], 300)
    assert await store.tail_events({"shared-name": Cursor(ALICE, 0)}, 100) == []
    assert len(await store.tail_events({"shared-name": Cursor(BOB, 0)}, 100)) == 3
    assert await store.session_owners(["shared-name", "none"]) == {"shared-name": BOB}


async def test_a_control_key_is_taken_once_across_store_clients(backend: Backend) -> None:
    stores = [backend.new_store(), backend.new_store()]
    for opened in stores:
        await opened.open()
    try:
        await new_session(stores[0])
        controls = [
            Control("s1", "run-1", "answer:call-1", "answer", {"content": who})
            for who in ("first", "second", "third", "fourth")
        ]
        taken = await asyncio.gather(
            *(stores[i % 2].send_control(ALICE, c, 300) for i, c in enumerate(controls))
        )
        assert sorted(taken) == [False, False, False, True]
        assert not await stores[0].send_control(MALLORY, Control("s1", "r", "k", "stop", {}), 1)
        pending = await stores[1].pending_controls(["s1"])
        assert [c.payload for c in pending] == [controls[taken.index(True)].payload]
        await stores[1].drop_controls("s1", "run-1")
        assert await stores[0].pending_controls(["s1"]) == []
    finally:
        for opened in stores:
            await opened.close()


async def test_run_slots_hold_the_tenant_limit_across_store_clients(backend: Backend) -> None:
    stores = [backend.new_store(), backend.new_store()]
    for opened in stores:
        await opened.open()
    try:
        results = await asyncio.gather(
            *(stores[i % 2].take_run_slot(ALICE, f"s{i}", f"run-{i}", 3, 1000) for i in range(8))
        )
        assert sorted(results, key=str) == [None] * 3 + ["too_many_runs"] * 5
        winner = results.index(None)
        again = await stores[1].take_run_slot(ALICE, f"s{winner}", "run-x", 10, 1000)
        assert again == "run_in_progress"
        assert await stores[0].take_run_slot(MALLORY, "m1", "run-m", 1, 1000) is None
        await stores[0].release_run_slot(f"s{winner}", f"run-{winner}")
        assert await stores[1].take_run_slot(ALICE, "s9", "run-9", 3, 1000) is None
        # A slot whose run the store does not show active is freed once past its grace.
        late = 1000 + SLOT_GRACE_MS + 1
        assert await stores[1].take_run_slot(ALICE, "s10", "run-10", 3, late) is None
    finally:
        for opened in stores:
            await opened.close()
