"""Reconnect with after_seq, restart on the same SQLite file, recovery of a dead run."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.exceptions import ConnectionClosed

from server import http_api, ws
from server.auth import LOCAL_SCOPE
from server.storage.base import WritesInOrder
from server.storage.sqlite import SQLiteStore
from tests.fakes.client import kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason
from tests.fakes.stores import FailsFirstIdleStatus, FailsFirstRunEnd, until_idle


async def test_a_dropped_socket_does_not_stop_the_run_and_replay_has_no_gap(server, fake_llm):
    fake_llm.script("reason", Reply(chunks=["one ", "two ", "three"], delay_s=0.05))
    fake_llm.script("act", act(FakeToolCall("get_current_time", {})))
    fake_llm.script("observe", observe("fine", final="All done."))
    c = await server.client()
    session = (await c.recv())["session_id"]
    await c.send({"type": "chat", "content": "go"})
    seen = await c.until("agent_reason_delta")
    await c.close()  # mid-run
    after = seen[-1]["seq"]
    async with await server.client(session_id=session, after_seq=after) as again:
        hello = await again.recv()
        assert hello["type"] == "session" and hello["resumed"] is True
        assert hello["session_id"] == session
        rest = await again.until("response_complete")
    seqs = [f["seq"] for f in seen] + [f["seq"] for f in rest]
    assert seqs == list(range(1, len(seqs) + 1))
    assert rest[-2]["final_answer"] == "All done."


async def test_replay_from_zero_equals_the_live_stream_and_the_http_events(server, fake_llm):
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        live = await c.run("first")
        live += await c.run("second")
    async with await server.client(session_id=session, after_seq=0) as again:
        hello = await again.recv()
        assert hello["last_seq"] == len(live) and hello["status"] == "idle"
        replayed = [await again.recv() for _ in live]
    assert replayed == live
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        events = (await http.get(f"/api/sessions/{session}/events")).json()
        tail = (await http.get(f"/api/sessions/{session}/events?after_seq={len(live) - 2}")).json()
        past = (await http.get(f"/api/sessions/{session}/events?after_seq=9999")).json()
    assert events == {"session_id": session, "events": live}
    assert tail["events"] == live[-2:]
    assert past["events"] == []


@pytest.mark.parametrize(("events", "page_bytes"), [(3, 4 << 20), (500, 200)])
async def test_a_replay_read_in_small_pages_is_whole_and_followed_by_live_events(
    server, fake_llm, monkeypatch, events, page_bytes
):
    """Pages end at `REPLAY_PAGE` events or past `REPLAY_BYTES`; either way the client gets
    every stored event once, in order, then the live ones."""
    monkeypatch.setattr(ws, "REPLAY_PAGE", events)
    monkeypatch.setattr(ws, "REPLAY_BYTES", page_bytes)
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        live = await c.run("first")
        live += await c.run("second")
    async with await server.client(session_id=session, after_seq=0) as again:
        await again.recv()
        replayed = [await again.recv() for _ in live]
        later = await again.run("third")
    assert replayed == live
    assert [f["seq"] for f in live + later] == list(range(1, len(live) + len(later) + 1))


async def test_http_events_of_a_long_session_are_sent_a_page_at_a_time(
    server, fake_llm, monkeypatch
):
    """A session longer than one page is streamed as it is read (never held whole), and its
    body is the same JSON, `limit` and `after_seq` included."""
    monkeypatch.setattr(http_api, "EVENTS_PAGE", 3)
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        live = await c.run("first")
        live += await c.run("second")
    url = f"/api/sessions/{session}/events"
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        whole = await http.get(url)
        some = (await http.get(f"{url}?after_seq=2&limit=7")).json()
        few = await http.get(f"{url}?limit=2")
    assert whole.json() == {"session_id": session, "events": live}
    assert "content-length" not in whole.headers  # streamed
    assert some["events"] == live[2:9]
    assert few.json()["events"] == live[:2] and "content-length" in few.headers  # one page


async def test_http_messages_of_large_messages_stop_at_the_byte_bound(
    server, fake_llm, monkeypatch
):
    """`/messages?limit=500` of a session of large messages was built whole (hundreds of MB
    for one request): it ends once past `MESSAGES_MAX_BYTES`, the newest kept."""
    monkeypatch.setattr(http_api, "MESSAGES_MAX_BYTES", 5_000)
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        for n in range(4):
            await c.run(f"{n} " + "x" * 3_000, agent_mode=False)
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        body = (await http.get(f"/api/sessions/{session}/messages?limit=500")).json()
    users = [m["content"][0] for m in body["messages"] if m["role"] == "user"]
    assert users == ["2", "3"] and body["total"] == 8  # 4 chats, 4 answers


async def test_two_connections_on_one_session_each_get_every_event(server, fake_llm):
    async with await server.client() as a:
        session = (await a.recv())["session_id"]
        async with await server.client(session_id=session) as b:
            await b.recv()
            frames_a = await a.run("hello")
            frames_b = await b.until("response_complete")
    assert frames_a == frames_b


class _StoreThatDeliversLate(SQLiteStore):
    """Once armed, a batch of events returns only when told: the events are committed (a
    replay can read them) but their session has not delivered them yet."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.armed = False
        self.stored = asyncio.Event()
        self.go = asyncio.Event()

    async def store_batch(self, *args: Any, **kwargs: Any) -> list[bytes]:
        bodies = await super().store_batch(*args, **kwargs)
        if self.armed and bodies:
            self.armed = False
            self.stored.set()
            await self.go.wait()
        return bodies


async def test_a_replay_of_events_not_yet_delivered_live_sends_each_once(
    server_factory, fake_llm, tmp_path
):
    store = _StoreThatDeliversLate(tmp_path / "late.db")
    async with server_factory(store=store) as s, await s.client() as first:
        session = (await first.recv())["session_id"]
        done = await first.run("one")
        after = done[-1]["seq"]
        store.armed = True
        await first.send({"type": "chat", "content": "two"})
        await asyncio.wait_for(store.stored.wait(), 5)
        async with await s.client(session_id=session, after_seq=after) as again:
            await again.recv()  # session
            replayed = await again.until(lambda f: f.get("seq") == after + 1)
            await again.send({"type": "dance"})  # answered once the replay is done
            answered = await again.until("error")
            store.go.set()  # now the session delivers what was replayed
            rest = await again.until("response_complete")
    seqs = [f["seq"] for f in replayed + answered + rest if "seq" in f]
    assert seqs == list(range(after + 1, after + 1 + len(seqs)))


async def test_reconnect_without_after_seq_gets_only_live_events(server, fake_llm):
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.run("one")
    async with await server.client(session_id=session) as again:
        hello = await again.recv()
        frames = await again.run("two")
    assert frames[0]["seq"] == hello["last_seq"] + 1


async def test_after_seq_past_the_end_replays_nothing_and_loses_no_live_event(server, fake_llm):
    """A client that claims more than the session has (a stale or foreign `after_seq`) gets
    every live event after the session's `last_seq`, not only those above its own number."""
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.run("one")
    async with await server.client(session_id=session, after_seq=99_999) as again:
        hello = await again.recv()
        frames = await again.run("two")
    seqs = [f["seq"] for f in frames if "seq" in f]
    assert seqs == list(range(hello["last_seq"] + 1, hello["last_seq"] + 1 + len(seqs)))
    assert frames[-1]["type"] == "response_complete"


async def test_invalid_after_seq_is_reported_and_nothing_is_replayed(server):
    async with await server.client() as c:
        session = (await c.recv())["session_id"]
        await c.run("one")
    async with await server.client(session_id=session, after_seq="-1") as again:
        assert (await again.recv())["type"] == "session"
        error = await again.recv()
        assert error["code"] == "invalid_message" and "after_seq" in error["message"]


async def test_restart_on_the_same_file_keeps_history_and_continues_seq(server_factory, fake_llm):
    fake_llm.script("observe", observe("ok", final="Remember: blue."))
    async with server_factory() as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            first = await c.run("my favourite colour is blue")
    async with server_factory() as s:
        async with await s.client(session_id=session) as c:
            hello = await c.recv()
            assert hello["resumed"] and hello["last_seq"] == first[-1]["seq"]
            second = await c.run("what is my favourite colour?")
    assert second[0]["seq"] == first[-1]["seq"] + 1
    reason_request = [r for r in fake_llm.requests if r.phase == "reason"][-1]
    contents = [m["content"] for m in reason_request.body["messages"]]
    assert "my favourite colour is blue" in contents and "Remember: blue." in contents


async def test_a_run_left_open_by_a_dead_process_is_closed_at_the_next_start(
    server_factory, fake_llm: FakeLLM, tmp_path
):
    call = FakeToolCall("get_current_time", {})
    fake_llm.script("act", act(call))
    fake_llm.script("observe", observe("ok", final="done"))
    async with server_factory() as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("go")
    # Rewind the file to the state a crash right after the tool call started leaves behind.
    run_id = frames[0]["run_id"]
    cut = next(f["seq"] for f in frames if f["type"] == "tool_start")
    db = sqlite3.connect(tmp_path / "agent.db")
    with db:
        db.execute("DELETE FROM events WHERE seq > ?", (cut,))
        rows = db.execute("SELECT sequence, body FROM messages ORDER BY sequence").fetchall()
        keep = next(seq for seq, body in rows if b'"tool_calls"' in body)
        db.execute("DELETE FROM messages WHERE sequence > ?", (keep,))
        db.execute(
            "UPDATE sessions SET status = 'running', active_run_id = ?, last_seq = ?, "
            "message_count = ?",
            (run_id, cut, keep + 1),
        )
    db.close()
    async with server_factory() as s:
        async with await s.client(session_id=session, after_seq=cut) as c:
            hello = await c.recv()
            assert hello["status"] == "idle"
            tail = await c.until("response_complete")
            assert [kind(f) for f in tail] == ["tool_error", "agent_stopped", "response_complete"]
            assert tail[1]["reason"] == "interrupted" and tail[1]["step"] == 1
            # Reason's and Act's calls were stored as messages: counted, tokens estimated.
            usage = tail[1]["usage"]
            assert (usage["llm_calls"], usage["estimated_calls"]) == (2, 2)
            assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
            assert [f["seq"] for f in tail] == [cut + 1, cut + 2, cut + 3]
            assert all(f["run_id"] == run_id for f in tail)
            again = await c.run("are you there?")
            assert again[-1]["type"] == "response_complete"
    act_request = [r for r in fake_llm.requests if r.phase == "act"][-1]
    tool = [m for m in act_request.body["messages"] if m["role"] == "tool"]
    assert tool[0]["tool_call_id"] == call.id and "server running" in tool[0]["content"]


async def test_a_run_whose_end_was_stored_without_its_status_is_not_ended_twice(
    server_factory, tmp_path
):
    async with server_factory() as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("go")
    run_id, last = frames[0]["run_id"], frames[-1]["seq"]
    # The state a backend that stores a run's end and its status in two writes is left in
    # when the second fails, or its process dies between them.
    db = sqlite3.connect(tmp_path / "agent.db")
    with db:
        db.execute("UPDATE sessions SET status = 'running', active_run_id = ?", (run_id,))
    db.close()
    async with server_factory() as s:
        async with await s.client(session_id=session, after_seq=0) as c:
            hello = await c.recv()
            replay = await c.until("response_complete")
            again = await c.run("are you there?")
    assert (hello["status"], hello["last_seq"]) == ("idle", last)
    assert replay == frames  # nothing was added to the run that ended
    assert again[0]["seq"] == last + 1


class _EndStatusFailsOnce(FailsFirstIdleStatus, WritesInOrder, SQLiteStore):
    """Stores a batch's parts one after another, as MongoDB does; the run's
    `response_complete` is stored, its session's `idle` status is not."""


async def test_a_run_end_stored_without_its_status_is_sent_once_and_settled_later(
    server_factory, tmp_path
):
    store = _EndStatusFailsOnce(tmp_path / "parts.db")
    async with server_factory(store=store, storage={"run_lease_s": 1}) as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("go")
            again = await c.run("and again")  # the session is free at once
        assert store.failed and [kind(f) for f in frames].count("response_complete") == 1
        assert {f["run_id"] for f in again} == {again[-1]["run_id"]} != {frames[0]["run_id"]}
        await until_idle(store, session)
        stored = [orjson.loads(b) for b in await store.read_events(LOCAL_SCOPE, session, 0)]
    ends = [f["run_id"] for f in stored if f["type"] == "response_complete"]
    assert ends == [frames[0]["run_id"], again[0]["run_id"]]
    assert not [f for f in stored if f.get("update_type") == "agent_stopped"]


class _RunEndFailsOnce(FailsFirstRunEnd, SQLiteStore):
    """The batch with a finished run's `response_complete` fails (a full disk at the end)."""


async def test_a_finished_run_whose_end_could_not_be_stored_is_closed_as_finished(
    server_factory, tmp_path
):
    """Its answer was stored; only its end was not. Settled later, it gets its
    `response_complete`, not an "interrupted" stop after its completion, and the model is
    not told a restart cut it short."""
    store = _RunEndFailsOnce(tmp_path / "end.db")
    async with server_factory(store=store, storage={"run_lease_s": 1}) as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("go")
        assert store.failed and "seq" not in frames[-1]  # sent live, not stored
        await until_idle(store, session)
        stored = [orjson.loads(b) for b in await store.read_events(LOCAL_SCOPE, session, 0)]
        history = await store.load_history(LOCAL_SCOPE, session)
    assert [kind(f) for f in stored][-2:] == ["agent_completion", "response_complete"]
    assert [f["seq"] for f in stored] == list(range(1, len(stored) + 1))
    assert not any("interrupted" in m.content for m in history if m.role == "system")


async def test_reason_output_of_earlier_runs_is_not_resent(server, fake_llm: FakeLLM):
    fake_llm.script("reason", reason("SECRET-REASONING of run one"))
    async with await server.client() as c:
        await c.recv()
        await c.run("one")
        await c.run("two")
    last = [r for r in fake_llm.requests if r.phase == "reason"][-1]
    assert not any("SECRET-REASONING" in m["content"] for m in last.body["messages"])


async def test_shutdown_stops_runs_while_clients_watch_then_closes_with_1001(
    server_factory, fake_llm
):
    fake_llm.script("reason", Reply(chunks=["forever"], hang_after=0))
    async with server_factory() as s:
        c = await s.client()
        session = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "long job"})
        await fake_llm.wait_for("reason")
        shutdown = asyncio.create_task(s.stop())
        frames = await c.until("response_complete")
        with pytest.raises(ConnectionClosed) as closed:
            await c.recv()
        await shutdown
    assert closed.value.rcvd.code == 1001
    assert [kind(f) for f in frames][-2:] == ["agent_stopped", "response_complete"]
    assert frames[-2]["reason"] == "shutdown"
    async with server_factory() as s:
        async with await s.client(session_id=session) as again:
            hello = await again.recv()
    assert hello["status"] == "idle" and hello["last_seq"] == frames[-1]["seq"]


class _CountingHistory(SQLiteStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.histories = 0

    async def load_history(self, *args: Any, **kwargs: Any) -> Any:
        self.histories += 1
        return await super().load_history(*args, **kwargs)


async def test_a_new_sessions_first_run_starts_without_reading_its_history(
    server_factory, fake_llm, tmp_path
):
    """Its conversation is the message the run just saved; a later run reads what is stored."""
    store = _CountingHistory(tmp_path / "count.db")
    async with server_factory(store=store) as s, await s.client() as c:
        await c.recv()
        await c.run("first question")
        first = store.histories
        await c.run("second question")
    assert (first, store.histories) == (0, 1)
    asked = [
        [m["content"] for m in r.body["messages"] if m["role"] == "user"]
        for r in fake_llm.requests
        if r.phase == "reason"
    ]
    assert any("first question" in text for text in asked[0])
    assert any("first question" in t for t in asked[-1]) and any(
        "second question" in t for t in asked[-1]
    )


async def test_a_dead_run_keeps_the_text_it_had_shown_as_a_stop_does(
    server_factory, fake_llm: FakeLLM, tmp_path
):
    """The process died while Reason streamed: its deltas are stored, its message is not.
    Closing the run keeps that text in the conversation (as a stop keeps what was shown), so
    the next run's model reads what the user read."""
    fake_llm.script("reason", reason("Checking the weather in Paris first."))
    async with server_factory() as s:
        async with await s.client() as c:
            session = (await c.recv())["session_id"]
            frames = await c.run("go")
    run_id = frames[0]["run_id"]
    deltas = [f for f in frames if f.get("update_type") == "agent_reason_delta"]
    cut = deltas[-1]["seq"]
    db = sqlite3.connect(tmp_path / "agent.db")
    with db:
        db.execute("DELETE FROM events WHERE seq > ?", (cut,))
        db.execute("DELETE FROM messages WHERE sequence > 0")  # the user's message stays
        db.execute(
            "UPDATE sessions SET status = 'running', active_run_id = ?, last_seq = ?, "
            "message_count = 1",
            (run_id, cut),
        )
    db.close()
    async with server_factory() as s:
        async with await s.client(session_id=session, after_seq=cut) as c:
            await c.recv()
            await c.until("response_complete")
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            messages = (await http.get(f"/api/sessions/{session}/messages")).json()["messages"]
    shown = "".join(d["delta"] for d in deltas).strip()
    kept = [m for m in messages if m["role"] == "assistant"]
    assert [(m["content"], m["status"], m.get("phase")) for m in kept] == [
        (shown, "stopped", "reason")
    ]
