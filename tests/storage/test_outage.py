"""Outage: what is retried, for how long, and what it says of the store (fast, in-process).

The real outages (FerretDB paused or killed, a SQLite lock held by another process) are in
tests/reliability/test_store_outages.py and test_store_pressure.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from bson import Binary, ObjectId

from agent.errors import StorageError
from server.app import create_store
from server.settings import Settings, StorageSettings
from server.storage.mongo import MongoStore
from server.storage.outage import Outage, StoreUnavailable, outage_of
from tests.storage.test_contract import ALICE, BOB, collect_pymongo_monitor_sockets, frame, seqs


class Flaky:
    """Fails with `error` `failures` times, then answers "stored"."""

    def __init__(self, failures: int, error: StorageError | None = None) -> None:
        self.failures = failures
        self.error = error or StoreUnavailable("cannot store events: unreachable (timed out)")
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "stored"


async def test_a_passing_failure_is_tried_again_until_the_store_answers() -> None:
    outage = Outage(5.0)
    action = Flaky(failures=3)
    assert await outage.ride(action) == "stored"
    assert action.calls == 4
    assert outage.health() == {"state": "ok"} and not outage.down


async def test_any_other_failure_is_raised_at_once() -> None:
    action = Flaky(failures=3, error=StorageError("database or disk is full"))
    with pytest.raises(StorageError, match="disk is full"):
        await Outage(5.0).ride(action)
    assert action.calls == 1


async def test_past_the_tolerance_the_failure_is_raised_and_new_work_fails_at_once() -> None:
    outage = Outage(0.3)
    first = Flaky(failures=10**6)
    with pytest.raises(StoreUnavailable):
        await outage.ride(first)
    assert first.calls > 1  # tried again within the tolerance
    assert outage.exhausted and outage.down
    state = outage.health()
    assert state["state"] == "unavailable" and state["tolerance_s"] == 0.3
    assert "unreachable" in state["error"]
    later = Flaky(failures=10**6)
    with pytest.raises(StoreUnavailable):
        await outage.ride(later)
    assert later.calls == 1  # the outage is already past the tolerance: one try
    assert await outage.ride(Flaky(failures=0)) == "stored"  # an answer ends the outage
    assert not outage.exhausted and outage.health() == {"state": "ok"}


async def test_no_tolerance_tries_once() -> None:
    action = Flaky(failures=1)
    with pytest.raises(StoreUnavailable):
        await Outage(0).ride(action)
    assert action.calls == 1


async def test_an_outage_is_logged_when_it_begins_passes_the_tolerance_and_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    outage = Outage(2.0, clock=lambda: now[0])

    async def fails() -> None:
        now[0] += 0.5  # each try waits half a second for an answer that never comes
        raise StoreUnavailable("cannot read events: unreachable (timed out)")

    with caplog.at_level(logging.DEBUG, logger="server.storage.outage"):
        for _ in range(3):  # three callers, each riding until the outage passes 2 s
            with pytest.raises(StoreUnavailable):
                await outage.ride(fails)
        assert await outage.ride(Flaky(failures=0)) == "stored"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    assert said[0].startswith("the store is unavailable")
    assert said[1].startswith("the store has been unavailable for more than 2 s")
    assert said[2].startswith("the store answers again")


async def test_a_single_timeout_under_load_is_no_outage() -> None:
    """Another operation answered while one timed out: the store is up, /healthz says ok."""
    now = [10.0]
    outage = Outage(30.0, clock=lambda: now[0])
    answered_meanwhile = Flaky(failures=0)

    async def times_out() -> str:
        if now[0] == 10.0:
            now[0] = 10.5
            await outage.ride(answered_meanwhile)  # another caller got its answer
            now[0] = 11.0
            raise StoreUnavailable("cannot store events: unreachable (timed out)")
        return "stored"

    assert await outage.ride(times_out) == "stored"
    assert outage.health() == {"state": "ok"}


# -- MongoDB: a write that timed out may have been stored ---------------------------------------


async def test_mongodb_writes_tried_again_after_a_lost_answer_are_stored_once(
    mongodb_uri: str, mongodb_database: str
) -> None:
    """Each try below repeats one whose answer was lost (the database took it, then the
    connection timed out): FerretDB paused with SIGSTOP does exactly this on resuming."""
    settings = StorageSettings(
        backend="mongodb", mongodb_uri=mongodb_uri, mongodb_database=mongodb_database
    )
    store = MongoStore(settings)
    await store.open()
    try:
        await store.create_session(ALICE, "s1", 100)
        await store.create_session(ALICE, "s1", 100)  # the retry finds its own session
        with pytest.raises(StorageError):
            await store.create_session(BOB, "s1", 100)  # someone else's id is still refused

        await store.append_events(ALICE, "s1", [frame(i) for i in range(2)], 200)
        docs = [{**_event_doc(seq), "_id": ObjectId()} for seq in (3, 4, 5)]
        assert await store._insert_until_taken("events", docs[:2]) == 2  # answer lost
        assert await store._insert_until_taken("events", docs) == 3  # the try again
        assert await store._insert_until_taken("events", docs) == 3  # and once more
        stored = await store.read_events(ALICE, "s1", 0)
        assert seqs(stored) == [1, 2, 3, 4, 5]
        taken = [{**_event_doc(6), "_id": ObjectId()}, {**_event_doc(6), "_id": ObjectId()}]
        assert await store._insert_until_taken("events", taken) == 1  # not ours: stops there

        for _ in range(2):  # the slot this run took in a try whose answer was lost is its own
            assert await store.take_run_slot(ALICE, "s1", "run-1", 5, 300) is None
        assert await store.take_run_slot(ALICE, "s1", "run-2", 5, 300) == "run_in_progress"
    finally:
        await store.close()
        collect_pymongo_monitor_sockets()


def _event_doc(seq: int) -> dict[str, Any]:
    return {
        "session_id": "s1",
        "tenant_id": ALICE.tenant_id,
        "user_id": ALICE.user_id,
        "seq": seq,
        "run_id": "run-1",
        "ts": 200,
        "body": Binary(orjson.dumps(frame(seq) | {"seq": seq})),
    }


@pytest.mark.parametrize("backend", ["sqlite", "mongodb"])
def test_each_backend_takes_the_configured_tolerance(
    backend: Literal["sqlite", "mongodb"], tmp_path: Path
) -> None:
    storage = StorageSettings(backend=backend, sqlite_path=tmp_path / "a.db", outage_tolerance_s=7)
    outage = outage_of(create_store(Settings(storage=storage)))
    assert outage is not None and outage.tolerance_s == 7
