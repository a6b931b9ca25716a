"""LiveSession stores what queued while the store was busy in one batch: the run's events and
its messages in one SQLite transaction, a status change after them, each event delivered
only once stored; a failed batch stores and delivers nothing and is reported as before. A run
waits for neither its events nor its messages, only for its status changes and last event,
and what it writes within one write window is stored together."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent.errors import StorageError
from agent.messages import Message
from server.events import Event, Unrecognized
from server.live import LiveSession, WriteBacklog, next_tick
from server.storage.base import Scope, WritesInOrder
from server.storage.sqlite import SQLiteStore
from tests.storage.sqlite_trace import traced

ALICE = Scope("acme", "alice")


def _event(frame: dict[str, Any]) -> Event:
    """A frame of any shape as an event to publish (sent and stored as it is)."""
    return Event(Unrecognized(frame), "s1")


class Recorder:
    """A subscriber that keeps what it was sent."""

    def __init__(self) -> None:
        self.frames: list[tuple[dict[str, object], int | None]] = []
        self.arrived = asyncio.Event()

    def deliver(self, text: str, seq: int | None, event: Event) -> None:
        self.frames.append((orjson.loads(text), seq))
        self.arrived.set()

    def finish(self, code: int) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


@pytest.fixture
def store(sqlite_store: SQLiteStore) -> SQLiteStore:
    return sqlite_store  # SQLite only here, not the per-backend `store` of conftest.py


async def _live(store: SQLiteStore, window: float = 0.005) -> tuple[LiveSession, Recorder]:
    record = await store.create_session(ALICE, "s1", 100)
    live = LiveSession(record, store, write_window_s=window)
    watcher = Recorder()
    live.subscribers.add(watcher)
    return live, watcher


def _read_only(store: SQLiteStore, on: bool) -> None:
    assert store._write_conn is not None
    store._write_conn.execute(f"PRAGMA query_only = {'ON' if on else 'OFF'}")


async def test_queued_events_and_the_messages_after_them_are_one_transaction(
    store: SQLiteStore,
) -> None:
    live, watcher = await _live(store, window=3600)  # the awaited write does not wait for it
    statements = await traced(store)
    for n in range(5):
        await live.publish_streamed([_event({"type": "delta", "n": n, "seq": 0})])
    await live.save_messages([Message("assistant", "hello")])
    assert watcher.frames == []  # queued, not stored yet: nothing delivered, nobody waited
    await live.publish([_event({"type": "reason", "n": 5, "seq": 0})])  # a write that is awaited

    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    assert [seq for _, seq in watcher.frames] == [1, 2, 3, 4, 5, 6]
    assert [frame["n"] for frame, _ in watcher.frames] == [0, 1, 2, 3, 4, 5]
    assert live.last_seq == 6
    history = await store.load_history(ALICE, "s1")
    assert [m.content for m in history] == ["hello"]


async def test_a_status_change_is_stored_with_the_writes_queued_before_it(
    store: SQLiteStore,
) -> None:
    live, watcher = await _live(store)
    statements = await traced(store)
    await live.publish_streamed([_event({"type": "tool_start", "seq": 0})])
    await live.save_messages([Message("assistant", "done")])
    await live.publish([_event({"type": "response_complete", "seq": 0})], status="idle")

    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1
    assert [frame["type"] for frame, _ in watcher.frames] == ["tool_start", "response_complete"]
    record = await store.get_session(ALICE, "s1")
    assert record is not None and record.status == "idle" and record.last_seq == 2
    assert live.status == "idle"


class _StoredOneAfterAnother(WritesInOrder, SQLiteStore):
    """A store that writes a batch's parts one after another (as MongoDB does), whose
    message writes fail."""

    async def append_messages(self, *args: Any, **kwargs: Any) -> None:
        raise StorageError("the messages could not be stored")


async def test_the_events_of_a_batch_stored_in_part_are_delivered_before_the_error(
    tmp_path: Path,
) -> None:
    store = _StoredOneAfterAnother(tmp_path / "parts.db")
    await store.open()
    try:
        live, watcher = await _live(store)
        await live.save_messages([Message("assistant", "lost")])
        with pytest.raises(StorageError, match="could not be stored"):
            await live.publish([_event({"type": "reason", "seq": 0})], status="awaiting_input")

        assert [(frame["type"], seq) for frame, seq in watcher.frames] == [("reason", 1)]
        assert live.last_seq == 1 and live.status == "idle"  # the status was not stored
        record = await store.get_session(ALICE, "s1")
        assert record is not None and record.status == "idle"
    finally:
        await store.close()


async def test_a_failed_batch_is_reported_to_its_awaited_write_and_loses_nothing_stored(
    store: SQLiteStore,
) -> None:
    live, watcher = await _live(store)
    await live.publish([_event({"type": "before", "seq": 0})])
    await store._in_writer(_read_only, store, True)
    await live.publish_streamed([_event({"type": "lost", "seq": 0})])
    await live.save_messages([Message("assistant", "lost too")])
    with pytest.raises(StorageError):
        await live.publish([_event({"type": "lost as well", "seq": 0})])
    assert [frame["type"] for frame, _ in watcher.frames] == ["before"]  # never sent unstored

    await store._in_writer(_read_only, store, False)
    with pytest.raises(StorageError):  # nothing the run does after a lost batch is stored
        await live.publish([_event({"type": "after the loss", "seq": 0})])
    live.mend()  # the run ended (RunDriver): a next run may write again
    await live.publish([_event({"type": "after", "seq": 0})])
    assert [seq for _, seq in watcher.frames] == [1, 2]
    stored = [orjson.loads(b) for b in await store.read_events(ALICE, "s1", 0)]
    assert [(f["type"], f["seq"]) for f in stored] == [("before", 1), ("after", 2)]
    assert await store.load_history(ALICE, "s1") == []


async def test_a_failed_batch_nobody_awaited_fails_the_next_write_once(
    store: SQLiteStore,
) -> None:
    live, watcher = await _live(store, window=0)  # stored at once, so the test can await it
    await store._in_writer(_read_only, store, True)
    await live.publish_streamed([_event({"type": "lost", "seq": 0})])
    await live.publish_streamed([_event({"type": "lost", "seq": 0})])
    assert live._writer is not None
    await live._writer  # the batch failed, and nobody was waiting for it
    await store._in_writer(_read_only, store, False)
    for _ in range(2):  # reported once, then refused: nothing after a lost batch is stored
        with pytest.raises(StorageError):
            await live.publish([_event({"type": "end", "seq": 0})])
    live.mend()  # the run ended (RunDriver): a next run may write again
    await live.publish([_event({"type": "end", "seq": 0})])

    assert [(frame["type"], seq) for frame, seq in watcher.frames] == [("end", 1)]


async def test_a_run_waits_for_its_writes_once_the_process_store_is_behind(
    store: SQLiteStore,
) -> None:
    record = await store.create_session(ALICE, "s1", 100)
    backlog = WriteBacklog(mark=1)
    live = LiveSession(record, store, backlog=backlog, write_window_s=3600)
    await live.publish_streamed(
        [_event({"type": "delta", "seq": 0})]
    )  # held: not counted as behind
    assert backlog.queued == 0 and live.last_seq == 0 and live._held is not None
    backlog.queued = 2  # other sessions' writes being stored: past the mark
    await live.save_messages([Message("assistant", "hello")])  # so the run waits for it
    assert [m.content for m in await store.load_history(ALICE, "s1")] == ["hello"]
    assert live.last_seq == 1  # the held event went with it, in order
    assert backlog.queued == 2  # its own writes were counted in and out again


class Gate:
    """Holds SQLite's `store_batch` until opened, to queue writes behind a batch."""

    def __init__(self, store: SQLiteStore) -> None:
        self.entered, self.open = asyncio.Event(), asyncio.Event()
        self.calls = 0
        self.order: list[str] = []  # "stored N" once the Nth append is done
        append = store.store_batch

        async def gated(*args: Any, **kwargs: Any) -> list[bytes]:
            self.calls += 1
            call = self.calls
            self.entered.set()
            await self.open.wait()
            bodies = await append(*args, **kwargs)
            self.order.append(f"stored {call}")
            return bodies

        store.store_batch = gated  # type: ignore[method-assign]


async def test_what_queues_behind_a_batch_waits_for_the_next_tick(store: SQLiteStore) -> None:
    """One step's phases share a store round trip even when a batch is being stored: what a
    run queues meanwhile is held, not stored right after it."""
    live, watcher = await _live(store, window=3600)
    gate = Gate(store)
    ending = asyncio.create_task(live.publish([_event({"type": "reason", "seq": 0})]))
    await asyncio.wait_for(gate.entered.wait(), timeout=5)
    await live.publish_streamed([_event({"type": "tool_start", "seq": 0})])  # behind the batch
    await live.save_messages([Message("assistant", "calling")])
    gate.open.set()
    await asyncio.wait_for(ending, timeout=5)

    assert [frame["type"] for frame, _ in watcher.frames] == ["reason"]
    assert gate.calls == 1 and live._held is not None  # held for the next tick
    await live.publish([_event({"type": "observe", "seq": 0})])  # an awaited write takes them along
    assert [frame["type"] for frame, _ in watcher.frames] == ["reason", "tool_start", "observe"]
    assert gate.calls == 2
    assert [m.content for m in await store.load_history(ALICE, "s1")] == ["calling"]


async def test_a_run_waits_once_its_writes_pile_up_behind_a_batch(store: SQLiteStore) -> None:
    live, watcher = await _live(store, window=3600)
    gate = Gate(store)
    first = asyncio.create_task(live.publish([_event({"type": "first", "seq": 0})]))
    await asyncio.wait_for(gate.entered.wait(), timeout=5)
    for n in range(8):  # up to the session's high-water mark nobody waits
        await live.publish_streamed([_event({"type": "delta", "n": n, "seq": 0})])
    assert not any(write.awaited for write in live._writes)

    async def ninth() -> None:
        await live.publish_streamed([_event({"type": "delta", "n": 8, "seq": 0})])
        gate.order.append("ninth returned")

    over = asyncio.create_task(ninth())  # queued before the gate opens: it runs first
    gate.open.set()
    await asyncio.wait_for(asyncio.gather(first, over), timeout=5)
    assert gate.order == ["stored 1", "stored 2", "ninth returned"]  # it waited for its batch
    assert [seq for _, seq in watcher.frames] == list(range(1, 11))


async def test_what_a_run_writes_within_the_window_is_stored_and_delivered_together(
    store: SQLiteStore,
) -> None:
    live, watcher = await _live(store, window=0.05)
    await live.publish([_event({"type": "start", "n": -1, "seq": 0})])  # awaited: not held
    assert [seq for _, seq in watcher.frames] == [1]
    watcher.arrived.clear()
    statements = await traced(store)
    for n in range(3):
        await live.publish_streamed([_event({"type": "delta", "n": n, "seq": 0})])
    assert len(watcher.frames) == 1  # held for the window: nothing stored, nothing delivered
    await asyncio.wait_for(watcher.arrived.wait(), timeout=5)  # no later write needed

    assert [seq for _, seq in watcher.frames] == [1, 2, 3, 4]  # the three, in one delivery
    (statement,) = set(statements)  # one statement (traced again for each trigger run) ...
    assert statement.count("('s1', ") == 3  # ... stored the three events
    stored = [orjson.loads(b) for b in await store.read_events(ALICE, "s1", 0)]
    assert [f["n"] for f in stored] == [-1, 0, 1, 2]


async def test_every_sessions_window_ends_on_the_same_tick(store: SQLiteStore) -> None:
    """Writes of different sessions held in one tick are handed to the store in one loop turn,
    so the store's group commit stores them in one transaction."""
    first, _ = await _live(store, window=3600)
    record = await store.create_session(ALICE, "s2", 100)
    second = LiveSession(record, store, write_window_s=3600)
    await first.publish_streamed([_event({"type": "delta", "seq": 0})])
    await second.publish_streamed([_event({"type": "delta", "seq": 0})])
    assert first._held is not None and second._held is not None
    assert first._held.when() == second._held.when()
    await first.publish([_event({"type": "end", "seq": 0})])  # awaited: takes the held write along
    await second.publish([_event({"type": "end", "seq": 0})])
    assert first._held is None and second._held is None


def test_a_window_ends_on_the_next_tick_after_now() -> None:
    assert next_tick(10.001, 0.005) == next_tick(10.0049, 0.005) == pytest.approx(10.005)
    assert next_tick(10.0051, 0.005) == pytest.approx(10.010)
    for now in (10.0, 10.005, 2000.0, 0.0):  # on a tick: the next one, never now
        assert now < next_tick(now, 0.005) <= now + 0.005 + 1e-9
