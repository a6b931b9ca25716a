"""LiveSession.follow: events another process stored reach this process's watchers once, in
order; an event of the run that last ended here, stored after its end was sent live (a write
whose answer a store failure lost, or the end stored once the store was back), is taken
without being sent, so a watcher never sees a run go on after its `response_complete`."""

from __future__ import annotations

import orjson

from server.events import Event
from server.live import LiveSession
from server.storage.base import Scope
from server.storage.sqlite import SQLiteStore

ALICE = Scope("acme", "alice")


class Watcher:
    def __init__(self) -> None:
        self.frames: list[dict[str, object]] = []

    def deliver(self, text: str, seq: int | None, event: Event) -> None:
        self.frames.append(orjson.loads(text))

    def finish(self, code: int) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


def _event(seq: int, run_id: str, kind: str) -> bytes:
    return orjson.dumps({"type": kind, "run_id": run_id, "seq": seq})


async def test_events_of_the_run_that_ended_here_are_taken_but_not_sent(
    sqlite_store: SQLiteStore,
) -> None:
    live = LiveSession(await sqlite_store.create_session(ALICE, "s1", 100), sqlite_store)
    watcher = Watcher()
    live.subscribers.add(watcher)
    live.ended_run = "r1"

    assert live.follow(1, _event(1, "r1", "agent_stopped"))
    assert live.follow(2, _event(2, "r1", "response_complete"))
    assert watcher.frames == [] and live.last_seq == 2 and live.status == "idle"
    assert live.follow(3, _event(3, "r2", "agent_user_message"))  # another run: sent
    assert not live.follow(5, _event(5, "r2", "agent_start"))  # a gap waits for the next poll

    assert [(f["run_id"], f["seq"]) for f in watcher.frames] == [("r2", 3)]
    assert live.last_seq == 3 and live.status == "running"
