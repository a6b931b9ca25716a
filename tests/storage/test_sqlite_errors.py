"""Only storage failures become StorageError; a programming error keeps its own type, so the
run reports it as an internal error (with a traceback in the log), not as `storage_error`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent.errors import StorageError
from agent.messages import Message
from server.events import Event, Unrecognized
from server.live import LiveSession
from server.storage.base import Scope, SessionRecord, StatusChange
from server.storage.sqlite import SQLiteStore

ALICE = Scope("acme", "alice")


def _event(frame: dict[str, Any]) -> Event:
    """A frame of any shape as an event to publish (sent and stored as it is)."""
    return Event(Unrecognized(frame), "s1")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "db.sqlite")
    await opened.open()
    await opened.create_session(ALICE, "s1", 100)
    yield opened
    await opened.close()


async def test_a_bug_in_a_write_is_not_a_storage_error(store: SQLiteStore) -> None:
    not_a_frame: Any = ("a", "tuple")
    with pytest.raises(TypeError):
        await store.append_events(ALICE, "s1", [not_a_frame], 200)
    # The failed operation was rolled back alone; the store still works.
    bodies = await store.append_events(ALICE, "s1", [{"type": "x"}], 300)
    assert [b for b in bodies] == [b'{"type":"x","seq":1}']


async def test_storage_failures_are_still_storage_errors(store: SQLiteStore) -> None:
    with pytest.raises(StorageError, match="does not exist"):
        await store.append_events(ALICE, "nope", [{"type": "x"}], 200)
    with pytest.raises(StorageError, match="not JSON-serializable"):
        await store.append_events(ALICE, "s1", [{"type": object()}], 200)
    with pytest.raises(StorageError):
        await store.create_session(ALICE, "s1", 200)  # a duplicate


async def test_a_batch_that_fails_in_part_stores_none_of_it(store: SQLiteStore) -> None:
    await store.store_batch(ALICE, "s1", 200, frames=[{"type": "a"}])
    not_text: Any = object()
    with pytest.raises(TypeError):  # the message cannot be encoded: a bug, in the writer
        await store.store_batch(
            ALICE,
            "s1",
            300,
            frames=[{"type": "b"}],
            messages=[Message("assistant", not_text)],
            status=StatusChange("running", "run-1"),
        )

    assert [orjson.loads(b)["type"] for b in await store.read_events(ALICE, "s1", 0)] == ["a"]
    record = await store.get_session(ALICE, "s1")
    assert record is not None and (record.status, record.last_seq) == ("idle", 1)
    assert await store.load_history(ALICE, "s1") == []
    bodies = await store.store_batch(ALICE, "s1", 400, frames=[{"type": "c"}])
    assert [orjson.loads(b)["seq"] for b in bodies] == [2]  # numbering goes on from what is stored


async def test_live_session_passes_a_bug_through_and_logs_it(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    record = SessionRecord("s1", "acme", "alice", "idle", "", 100, 100, 0)
    live = LiveSession(record, store)
    not_a_frame: Any = ("a", "tuple")
    with pytest.raises(AttributeError):  # no event: a bug
        await live.publish([not_a_frame])
    (logged,) = [r for r in caplog.records if r.name == "server.live"]
    assert logged.levelno == logging.ERROR and logged.exc_info is not None
    with pytest.raises(StorageError):  # a real storage failure stays one
        await live.publish([_event({"type": object()})])
    live.mend()  # as at the end of the run that lost the batch
    await live.publish([_event({"type": "ok"})])
    assert live.last_seq == 1
