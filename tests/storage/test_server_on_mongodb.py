"""The real server (uvicorn, WebSocket, HTTP API) on the MongoDB backend, over FerretDB.

A full agent run with replay and the HTTP views; a restart on the same database; and the
database dying mid-run on a server with no `storage.outage_tolerance_s`: the run must end with
`storage_error` then `response_complete` within seconds, its connection closed with 1012, the
server must keep serving (and refuse new runs with `storage_unavailable`), and once the
database is back the same session, resumed from the last `seq` seen, must take a new run.
A run's end stored without its status (MongoDB writes them one after the other) is sent once
and never ended a second time. Waits are on frames and conditions, each with a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from pymongo import AsyncMongoClient

from server.settings import StorageSettings
from server.storage.mongo import MongoStore
from tests.conftest import Running, ServerFactory
from tests.fakes.client import Client, Frame, kind
from tests.fakes.ferretdb import FerretDB
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason
from tests.fakes.stores import FailsFirstIdleStatus, until_idle
from tests.storage.test_contract import collect_pymongo_monitor_sockets

TIMEOUT_MS = 500  # each database operation fails within this once the database is gone
FAILURE_BOUND_S = 5.0  # a run hit by the outage must be over within this


def mongodb(uri: str, database: str) -> dict[str, Any]:
    return {
        "backend": "mongodb",
        "mongodb_uri": uri,
        "mongodb_database": database,
        "mongodb_timeout_ms": TIMEOUT_MS,
    }


def no_tolerance(uri: str) -> dict[str, Any]:
    """A server that does not ride through an outage (tests/reliability/test_store_outages.py
    has those that do): a run that needs the dead database ends at once."""
    return {**mongodb(uri, "outage"), "outage_tolerance_s": 0}


async def resumed(running: Running, session: str, client: Client) -> tuple[Client, list[Frame]]:
    """`client` was closed with 1012 after its run ended in the outage: a new connection from
    the last `seq` it saw, once the database is back, and the frames replayed to it (the
    rest of that run, closed in the store since), gap-free."""
    await client.ws.wait_closed()
    assert client.ws.close_code == 1012
    last = max(f["seq"] for f in client.seen if "seq" in f)
    again = await running.client(session_id=session, after_seq=last)
    hello = await again.recv()
    replayed = [await again.recv() for _ in range(hello["last_seq"] - last)]
    assert seqs(replayed) == list(range(last + 1, hello["last_seq"] + 1))
    assert kind(replayed[-1]) == "response_complete"
    return again, replayed


def seqs(frames: list[Frame]) -> list[int]:
    return [f["seq"] for f in frames if "seq" in f]


async def get_json(running: Running, path: str) -> tuple[int, Any]:
    async with httpx.AsyncClient(base_url=f"http://{running.address}", timeout=5) as http:
        response = await http.get(path)
    return response.status_code, response.json()


async def poll(check: Callable[[], Awaitable[bool]], timeout: float = 15.0) -> None:
    """Retry `check` until it holds, within `timeout` (as a client retrying would)."""
    async with asyncio.timeout(timeout):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)  # retry interval, bounded by the deadline above


@asynccontextmanager
async def ferretdb(binary: Path, root: Path) -> AsyncIterator[FerretDB]:
    """A FerretDB process of the test's own, which it may kill and start again."""
    server = FerretDB(binary, root)
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)
        collect_pymongo_monitor_sockets()


# -- a healthy database ------------------------------------------------------------------------


async def test_a_full_run_replays_after_reconnect_and_over_http(
    server_factory: ServerFactory, fake_llm: FakeLLM, mongodb_uri: str, mongodb_database: str
) -> None:
    fake_llm.script("reason", reason("Let me check the clock.", delay_s=0.02))
    fake_llm.script("act", act(FakeToolCall("get_current_time", {})))
    fake_llm.script("observe", observe("Got it.", final="It is late."))
    async with server_factory(storage=mongodb(mongodb_uri, mongodb_database)) as running:
        c = await running.client()
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "what time is it?"})
        seen = await c.until("agent_reason_delta")
        await c.close()  # mid-run: the run goes on without a watcher
        async with await running.client(session_id=session, after_seq=seen[-1]["seq"]) as again:
            hello = await again.recv()
            rest = await again.until("response_complete", timeout=10)
        live = seen + rest
        async with await running.client(session_id=session, after_seq=0) as replay:
            resumed = await replay.recv()
            replayed = [await replay.recv() for _ in live]
        events_status, events = await get_json(running, f"/api/sessions/{session}/events")
        _, tail = await get_json(running, f"/api/sessions/{session}/events?after_seq=3")
        messages_status, messages = await get_json(running, f"/api/sessions/{session}/messages")

    assert hello["resumed"] is True and hello["session_id"] == session
    assert seqs(live) == list(range(1, len(live) + 1))
    kinds = [kind(f) for f in live]
    assert {"agent_start", "tool_start", "tool_complete", "agent_completion"} <= set(kinds)
    assert kinds[-1] == "response_complete"
    assert live[-2]["final_answer"] == "It is late."
    assert (resumed["status"], resumed["last_seq"]) == ("idle", len(live))
    assert replayed == live
    assert events_status == 200 and events == {"session_id": session, "events": live}
    assert tail["events"] == live[3:]
    assert messages_status == 200 and messages["session_id"] == session
    roles = [m["role"] for m in messages["messages"]]
    assert roles[0] == "user" and "tool" in roles and messages["total"] == len(roles)
    assert messages["messages"][0]["content"] == "what time is it?"


async def test_a_new_server_on_the_same_database_replays_every_event(
    server_factory: ServerFactory, fake_llm: FakeLLM, mongodb_uri: str, mongodb_database: str
) -> None:
    storage = mongodb(mongodb_uri, mongodb_database)
    session, live = await _runs_on_a_first_server(server_factory, storage, "first", "second")

    async with server_factory(storage=storage) as second:
        async with await second.client(session_id=session, after_seq=0) as again:
            hello = await again.recv()
            replayed = [await again.recv() for _ in live]
            more = await again.run("third")
        _, listed = await get_json(second, "/api/sessions")

    assert (hello["resumed"], hello["status"], hello["last_seq"]) == (True, "idle", len(live))
    assert replayed == live
    assert seqs(live + more) == list(range(1, len(live) + len(more) + 1))
    assert [s["session_id"] for s in listed["sessions"]] == [session]


async def test_memory_tools_keep_their_memories_in_the_mongodb_database(
    server_factory: ServerFactory, fake_llm: FakeLLM, mongodb_uri: str, mongodb_database: str
) -> None:
    """Needs server/app.py to wire MongoMemoryStore for the mongodb backend."""
    save = FakeToolCall("memory_save", {"content": "Prefers tea", "category": "preference"})
    recall = FakeToolCall("memory_retrieve", {"query": "tea"})
    fake_llm.script("act", act(save), act(recall))
    fake_llm.script("observe", observe("saved"), observe("ok", final="You like tea."))
    tools = {"enabled": ["memory_save", "memory_retrieve"]}
    storage = mongodb(mongodb_uri, mongodb_database)
    async with server_factory(storage=storage, tools=tools) as running:
        async with await running.client() as c:
            await c.recv()
            frames = await c.run("remember I like tea", agent_max_steps=2)
    done = [f["result"] for f in frames if kind(f) == "tool_complete"]
    assert done[0]["status"] == "saved"
    assert [m["content"] for m in done[1]["memories"]] == ["Prefers tea"]
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_uri, timeoutMS=5000)
    try:
        stored = await client[mongodb_database]["memories"].find({}, {"_id": 0}).to_list()
    finally:
        await client.close()
    assert [(m["content"], m["use_count"]) for m in stored] == [("Prefers tea", 1)]


# -- the database dies -------------------------------------------------------------------------


async def run_fails_with_storage_error(client: Client) -> list[Frame]:
    """Frames up to `response_complete`, which must come within FAILURE_BOUND_S."""
    frames = await client.until("response_complete", timeout=FAILURE_BOUND_S)
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["code"] for e in errors] == ["storage_error"], frames
    assert frames[-1]["type"] == "response_complete"
    assert frames.index(errors[0]) < len(frames) - 1  # error first, then response_complete
    return frames


async def assert_still_serving(running: Running) -> None:
    """While the database is down: sockets open, health says so, a chat is refused with
    storage_unavailable (nothing starts), reads fail cleanly."""
    async with await running.client() as fresh:
        hello = await fresh.recv()
        assert hello["type"] == "session" and hello["resumed"] is False
        await fresh.send({"type": "chat", "content": "anyone there?"})
        refused = await fresh.recv(timeout=FAILURE_BOUND_S)
        assert (refused["type"], refused["code"]) == ("error", "storage_unavailable")
    status, body = await get_json(running, "/healthz")
    assert (status, body["status"], body["store"]["state"]) == (200, "degraded", "unavailable")
    status, body = await get_json(running, "/api/sessions")
    assert (status, body["code"]) == (503, "storage_error")


async def test_database_killed_while_streaming_ends_the_run_then_the_session_recovers(
    server_factory: ServerFactory, fake_llm: FakeLLM, ferretdb_bin: Path, tmp_path: Path
) -> None:
    """No client action: the write after the kill fails, and the run ends on its own."""
    chunks = [f"word{i} " for i in range(40)]
    fake_llm.script("reason", Reply(chunks=chunks, delay_s=0.05))
    async with (
        ferretdb(ferretdb_bin, tmp_path / "ferretdb") as database,
        server_factory(storage=no_tolerance(database.uri)) as running,
    ):
        c = await running.client()
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "tell me a long story"})
        before = await c.until("agent_reason_delta")

        await asyncio.to_thread(database.kill)
        frames = await run_fails_with_storage_error(c)
        assert "agent_completion" not in [kind(f) for f in frames]
        await assert_still_serving(running)

        await asyncio.to_thread(database.start)  # same port, same data
        await _wait_readable(running, session)
        c, replayed = await resumed(running, session, c)
        after = await c.run("and now?", timeout=10)
        await c.close()
        async with await running.client(session_id=session, after_seq=0) as replay:
            hello = await replay.recv()
            stored = [await replay.recv() for _ in range(hello["last_seq"])]

    assert [e for e in after if e["type"] == "error"] == []
    assert kind(after[-1]) == "response_complete" and kind(after[-2]) == "agent_completion"
    assert seqs(stored) == list(range(1, len(stored) + 1))  # no gap across the outage
    assert stored[: len(before)] == before
    # A write the database took just before it died, whose answer was lost, is stored but
    # not sent to this client, which saw the run end: the replay has it, in its place.
    assert {f["run_id"] for f in after} == {after[-1]["run_id"]}
    assert stored[-len(after) :] == after
    assert stored[-len(after) - len(replayed) : -len(after)] == replayed  # the rest, no gap
    # What was stored before the kill but arrived after `before` replays as it was sent. The
    # first run's end could not be stored during the outage; it was closed in the store before
    # the next run began, so a replay settles too.
    middle = stored[len(before) : -len(after)]
    seen_live = [f for f in frames if "seq" in f]
    assert middle[: len(seen_live)] == seen_live
    unseen = middle[len(seen_live) :]  # the run's end, after any write whose answer was lost
    assert [kind(e) for e in unseen[-2:]] == ["agent_stopped", "response_complete"]
    assert {e["run_id"] for e in middle} == {before[0]["run_id"]}
    assert hello["status"] == "idle"


async def test_stop_while_the_database_is_down_completes_and_the_session_takes_a_new_run(
    server_factory: ServerFactory, fake_llm: FakeLLM, ferretdb_bin: Path, tmp_path: Path
) -> None:
    """The model hangs, so nothing writes until the stop; its writes then fail."""
    fake_llm.script("reason", Reply(chunks=["a", "b"], hang_after=1))
    async with (
        ferretdb(ferretdb_bin, tmp_path / "ferretdb") as database,
        server_factory(storage=no_tolerance(database.uri)) as running,
    ):
        c = await running.client()
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "hello"})
        await c.until("agent_reason_delta")

        await asyncio.to_thread(database.kill)
        await c.send({"type": "agent_control", "action": "stop"})
        await run_fails_with_storage_error(c)
        await fake_llm.wait_disconnects(1)  # the hanging model call was abandoned
        await assert_still_serving(running)

        await asyncio.to_thread(database.start)
        await _wait_readable(running, session)
        c, _ = await resumed(running, session, c)
        after = await c.run("try again", timeout=10)
        await c.close()

    assert [e for e in after if e["type"] == "error"] == []
    assert kind(after[-2]) == "agent_completion"


async def test_reconnecting_after_an_outage_reports_the_session_idle(
    server_factory: ServerFactory, fake_llm: FakeLLM, ferretdb_bin: Path, tmp_path: Path
) -> None:
    fake_llm.script("reason", Reply(chunks=["a", "b"], hang_after=1))
    async with (
        ferretdb(ferretdb_bin, tmp_path / "ferretdb") as database,
        server_factory(storage=no_tolerance(database.uri)) as running,
    ):
        async with await running.client() as c:
            session = (await c.recv())["session_id"]
            await c.send({"type": "chat", "content": "hello"})
            await c.until("agent_reason_delta")
            await asyncio.to_thread(database.kill)
            await c.send({"type": "agent_control", "action": "stop"})
            await run_fails_with_storage_error(c)
        await running.app.state.services.hub.wait_empty()  # nobody holds the session now

        await asyncio.to_thread(database.start)
        await _wait_readable(running, session)
        async with await running.client(session_id=session) as again:
            hello = await again.recv()
    assert hello["status"] == "idle"


async def _runs_on_a_first_server(
    server_factory: ServerFactory, storage: dict[str, Any], *chats: str
) -> tuple[str, list[dict[str, Any]]]:
    """A server on `storage` runs `chats` on one new session and stops: (session, frames)."""
    async with server_factory(storage=storage) as first:
        async with await first.client() as c:
            session = str((await c.recv())["session_id"])
            frames = [frame for chat in chats for frame in await c.run(chat)]
    return session, frames


async def _wait_readable(running: Running, session: str) -> None:
    """Until the server reads the session again (the driver rediscovers the database)."""

    async def readable() -> bool:
        status, _ = await get_json(running, f"/api/sessions/{session}/events")
        return status == 200

    await poll(readable)


async def test_a_second_server_leaves_the_live_runs_of_the_first_alone(
    server_factory: ServerFactory, fake_llm: FakeLLM, mongodb_uri: str, mongodb_database: str
) -> None:
    fake_llm.script("reason", Reply(chunks=["a", "b"], hang_after=1))
    storage = mongodb(mongodb_uri, mongodb_database)
    async with server_factory(storage=storage) as first:
        async with await first.client() as c:
            session = (await c.recv())["session_id"]
            await c.send({"type": "chat", "content": "hello"})
            await c.until("agent_reason_delta")
            async with server_factory(storage=storage) as second:
                _, events = await get_json(second, f"/api/sessions/{session}/events")
            await c.send({"type": "agent_control", "action": "stop"})
            await c.until("response_complete")
    assert [kind(e) for e in events["events"]][-1] == "agent_reason_delta"


# -- a run's end and its status: two writes on MongoDB -----------------------------------------


class _EndStatusFailsOnce(FailsFirstIdleStatus, MongoStore):
    """The run's `response_complete` is stored, its session's `idle` status is not."""


async def test_a_run_end_stored_without_its_status_is_sent_once_and_settled(
    server_factory: ServerFactory, fake_llm: FakeLLM, mongodb_uri: str, mongodb_database: str
) -> None:
    storage = mongodb(mongodb_uri, mongodb_database)
    store = _EndStatusFailsOnce(StorageSettings(**storage))
    async with server_factory(store=store, storage={**storage, "run_lease_s": 1}) as running:
        async with await running.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("go")
            again = await c.run("and again")  # the session is free at once
        await until_idle(store, session)
        _, events = await get_json(running, f"/api/sessions/{session}/events")
    assert store.failed and [kind(f) for f in frames].count("response_complete") == 1
    assert {f["run_id"] for f in again} == {again[-1]["run_id"]} != {frames[0]["run_id"]}
    assert events["events"] == frames + again  # no second end, no `interrupted` stop


async def test_a_new_server_does_not_end_a_run_twice_whose_status_write_was_lost(
    server_factory: ServerFactory, fake_llm: FakeLLM, mongodb_uri: str, mongodb_database: str
) -> None:
    storage = mongodb(mongodb_uri, mongodb_database)
    session, frames = await _runs_on_a_first_server(server_factory, storage, "go")
    # The state a process leaves that died between storing the run's end and its status.
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_uri, timeoutMS=5000)
    try:
        await client[mongodb_database]["sessions"].update_one(
            {"session_id": session},
            {"$set": {"status": "running", "active_run_id": frames[0]["run_id"], "lease_until": 0}},
        )
    finally:
        await client.close()
    async with server_factory(storage=storage) as second:
        async with await second.client(session_id=session, after_seq=0) as again:
            hello = await again.recv()
            replayed = [await again.recv() for _ in frames]
            more = await again.run("are you there?")
    assert (hello["status"], hello["last_seq"]) == ("idle", frames[-1]["seq"])
    assert replayed == frames
    assert more[0]["seq"] == frames[-1]["seq"] + 1
