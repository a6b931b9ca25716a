"""Two servers (two apps, each with its own store client and hub) on one SQLite file with
`storage.shared`: a cheap stand-in for two processes, for what the process tests
(tests/storage/test_replicas.py) do not cover: approvals sent to the process that does not
run the call, and the single-process path that must not poll at all.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from server import live as live_module
from server.agui_threads import thread_session
from server.storage.base import Scope, WritesInOrder
from server.storage.sqlite import SQLiteStore
from tests.conftest import ServerFactory
from tests.fakes.client import Client
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act
from tests.fakes.stores import FailsFirstIdleStatus

SHARED: dict[str, Any] = {"shared": True, "poll_interval_s": 0.02}
APPROVE = {"enabled": ["get_current_time"], "approval": ["get_current_time"]}


def decision(call_id: str, approve: bool) -> dict[str, Any]:
    return {"type": "agent_tool_decision", "tool_call_id": call_id, "approve": approve}


async def test_an_approval_sent_to_the_other_server_reaches_the_run(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    call = FakeToolCall("get_current_time", {"timezone": "UTC"})
    fake_llm.script("act", act(call))
    async with (
        server_factory(storage=SHARED, tools=APPROVE) as a,
        server_factory(storage=SHARED, tools=APPROVE) as b,
    ):
        owner = await a.client()
        session = (await owner.recv())["session_id"]
        await owner.send({"type": "chat", "content": "what time is it?"})
        asked = (await owner.until("agent_tool_approval"))[-1]
        async with await b.client(session_id=session) as other:
            hello = await other.recv()
            await other.send(decision("call_other", True))
            wrong = await other.recv()
            await other.send(decision(call.id, True))
            frames = await other.until("response_complete", timeout=10)
            await other.send(decision(call.id, True))
            late = await other.recv()
        owned = await owner.until("response_complete", timeout=10)
        await owner.close()
    assert asked["tool_call_id"] == call.id
    assert hello["status"] == "awaiting_approval"
    assert hello["pending_approval"]["tool_call_id"] == call.id
    assert hello["pending_approval"]["tool_name"] == "get_current_time"
    assert wrong["code"] == "unknown_tool_call"
    kinds = [f.get("update_type") or f["type"] for f in frames]
    assert "tool_complete" in kinds and "agent_completion" in kinds
    assert [f["seq"] for f in frames] == [f["seq"] for f in owned]
    assert late["code"] == "not_awaiting_approval"


async def test_a_lone_sqlite_server_starts_no_relay(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    own_file = {"sqlite_path": str(tmp_path / "alone.db")}  # a lone server owns its file
    async with server_factory(storage=own_file) as alone, server_factory(storage=SHARED) as shared:
        assert alone.app.state.services.hub._relay is None
        assert shared.app.state.services.hub._relay is not None


async def test_a_deleted_session_made_again_by_another_user_is_not_followed_for_the_first(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    """Alice watches her session on server b and deletes it on server a; Bob then starts a
    thread with the same thread id (AG-UI thread ids are the client's; his is a session of
    his own). Alice's watcher on b is closed as deleted and never gets a frame of Bob's
    conversation."""
    tokens = {
        "alice-token-0123456789": {"tenant": "acme", "user": "alice"},
        "bob-token-0123456789": {"tenant": "other", "user": "bob"},
    }
    alice = {"Authorization": "Bearer alice-token-0123456789"}
    bob = {"Authorization": "Bearer bob-token-0123456789"}
    thread = "support-chat"
    body = {
        "threadId": thread,
        "runId": "r1",
        "state": None,
        "tools": [],
        "context": [],
        "forwardedProps": None,
        "messages": [{"id": "m1", "role": "user", "content": "My IBAN is DE89 3704."}],
    }
    alices = thread_session(Scope("acme", "alice"), thread)
    ids = {alices, thread_session(Scope("other", "bob"), thread)}
    auth = {"tokens": tokens}
    async with (
        server_factory(storage=SHARED, auth=auth) as a,
        server_factory(storage=SHARED, auth=auth) as b,
        httpx.AsyncClient(base_url=f"http://{a.address}", timeout=10) as http,
    ):
        assert (await http.post("/agui", json=body, headers=alice)).status_code == 200
        async with await Client.connect(b.address, headers=alice, session_id=alices) as watcher:
            assert (await watcher.recv())["resumed"] is True
            deleted = await http.delete(f"/api/sessions/{alices}", headers=alice)
            assert deleted.status_code == 204
            assert (await http.post("/agui", json=body, headers=bob)).status_code == 200
            seen: list[dict[str, Any]] = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    seen.append(await watcher.recv(timeout=10))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404
    assert all(f.get("session_id") not in ids or f["type"] == "error" for f in seen), seen


async def test_a_client_moving_to_a_server_whose_view_lags_gets_no_event_twice(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    """b follows the session for a watcher of its own and polls slowly, so its count lags the
    store. A client that saw the whole run on a reconnects to b with its `after_seq`: it is
    sent nothing it already has (b replayed from its own stale count, and sent it again)."""
    fake_llm.script("reason", Reply(chunks=[f"w{i} " for i in range(30)], delay_s=0.005))
    slow = {"shared": True, "poll_interval_s": 5}
    async with server_factory(storage=SHARED) as a, server_factory(storage=slow) as b:
        mover = await a.client()
        session = (await mover.recv())["session_id"]
        await mover.send({"type": "chat", "content": "go"})
        await mover.until("agent_reason_delta")  # stored and streaming
        watcher = await b.client(session_id=session, after_seq=0)  # b follows from here
        await watcher.recv()
        seen = (await mover.until("response_complete", timeout=15))[-1]["seq"]
        await mover.close()
        async with await b.client(session_id=session, after_seq=seen) as moved:
            hello = await moved.recv()
            await moved.send({"type": "chat", "content": "and now?"})
            first = await moved.recv()
        await watcher.close()
    assert hello["type"] == "session"
    assert first.get("update_type") == "agent_user_message" and first["seq"] == seen + 1


async def test_a_stop_its_dead_process_never_read_closes_the_run_as_stopped_by_the_user(
    server_factory: ServerFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """The stop was accepted (stored for the process that ran the run), and that process died
    before it read it: the run is closed as the user's stop, not as `interrupted`."""
    async with server_factory(storage=SHARED) as a:
        async with await a.client() as c:
            session = (await c.recv())["session_id"]
            await c.send({"type": "chat", "content": "go"})
            started = await c.until("agent_start")
    run_id, cut = started[0]["run_id"], started[-1]["seq"]
    # What a process killed after the stop was stored leaves behind: the run open, its
    # lease run out, the stop waiting.
    db = sqlite3.connect(tmp_path / "agent.db")
    with db:
        db.execute("DELETE FROM events WHERE seq > ?", (cut,))
        db.execute(
            "UPDATE sessions SET status = 'running', active_run_id = ?, last_seq = ?, "
            "lease_until = 0",
            (run_id, cut),
        )
        db.execute(
            "INSERT INTO controls (session_id, key, run_id, kind, payload, created_at) "
            "VALUES (?, ?, ?, 'stop', '{}', 0)",
            (session, f"stop:{run_id}", run_id),
        )
    db.close()
    async with server_factory(storage=SHARED) as b:
        async with await b.client(session_id=session, after_seq=cut) as c:
            await c.recv()
            tail = await c.until("response_complete")
    stopped = [f for f in tail if f.get("update_type") == "agent_stopped"]
    assert [s["reason"] for s in stopped] == ["user"] and stopped[0]["run_id"] == run_id


class _QuestionStatusLate(WritesInOrder, SQLiteStore):
    """Stores a batch's events, then its status, as MongoDB does; the status that says a
    question waits is held until `go` is set (a process opening the session in between sees
    the question's event, and a status from before it)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, shared=True)
        self.go = asyncio.Event()
        self.held = asyncio.Event()

    async def update_session(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("status") == "awaiting_input":
            self.held.set()
            await self.go.wait()
        await super().update_session(*args, **kwargs)


async def test_a_session_opened_between_a_question_and_its_status_shows_the_question(
    server_factory: ServerFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Which city?"})))
    late = _QuestionStatusLate(tmp_path / "agent.db")
    async with (
        server_factory(store=late, storage=SHARED) as a,
        server_factory(storage=SHARED) as b,
    ):
        owner = await a.client()
        session = (await owner.recv())["session_id"]
        await owner.send({"type": "chat", "content": "plan my trip"})
        await asyncio.wait_for(late.held.wait(), 10)  # the question's event is stored
        async with await b.client(session_id=session) as other:
            hello = await other.recv()
        late.go.set()
        await owner.close()
    assert hello["status"] == "awaiting_input"
    assert hello["pending_input"]["question"] == "Which city?"


class _EndStatusLost(FailsFirstIdleStatus, WritesInOrder, SQLiteStore):
    """The first run's `idle` status is not stored (its events are)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, shared=True)


async def test_a_run_after_one_whose_end_status_was_lost_is_not_taken_for_taken_over(
    server_factory: ServerFactory, fake_llm: FakeLLM, tmp_path: Path, monkeypatch
) -> None:
    """The session still shows the first run when the second starts, long after the first
    run's lease was last confirmed: the second run has no lease of its own to check yet,
    so it must not renew the first one's and conclude that another process took it over."""
    store = _EndStatusLost(tmp_path / "agent.db")
    async with server_factory(store=store, storage=SHARED) as s:
        async with await s.client() as c:
            await c.recv()
            first = await c.run("go")
            later = live_module.lease_clock() + 3600  # half a lease and more has passed
            monkeypatch.setattr(live_module, "lease_clock", lambda: later)
            second = await c.run("and again")
    assert store.failed
    assert second[-1]["type"] == "response_complete"
    assert second[-2].get("update_type") == "agent_completion"
    assert second[0]["run_id"] != first[0]["run_id"]


async def test_a_version_switched_on_one_server_is_followed_on_the_other(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    """Versions of a turn across processes: the `active_path` event reaches the other
    server's watchers, which take it for no run (status stays idle), and a run started there
    next reads the version shown."""
    fake_llm.script("chat", Reply(chunks=["Paris."]), Reply(chunks=["Rome."]))
    chat = {"type": "chat", "agent_mode": False}
    async with server_factory(storage=SHARED) as a, server_factory(storage=SHARED) as b:
        async with await a.client() as here:
            session = (await here.recv())["session_id"]
            first = await here.run("France?", agent_mode=False)
            await here.send({**chat, "content": "Italy?", "replaces": first[0]["run_id"]})
            second = await here.until("response_complete")
            async with await b.client(session_id=session) as there:
                hello = await there.recv()
                assert hello["active_path"] == [second[0]["run_id"]]
                await here.send({"type": "select_version", "run_id": first[0]["run_id"]})
                switched = (await there.until("active_path", timeout=10))[-1]
                assert switched["active_path"] == [first[0]["run_id"]]
                later = await there.run("And its river?", agent_mode=False)
        read = [m["content"] for m in fake_llm.requests[-1].body["messages"][1:]]
    assert later[0]["parent_run_id"] == first[0]["run_id"]
    assert read == ["France?", "Paris.", "And its river?"]


async def test_a_question_shows_the_same_in_both_processes_and_an_answer_clears_both(
    server_factory: ServerFactory, fake_llm: FakeLLM
) -> None:
    """The run's process reads what waits from the run itself, the other from the store: both
    show the one question the run asked, and neither shows it once it is answered."""
    fake_llm.script("act", act(FakeToolCall("request_input", {"question": "Which city?"})))
    async with (
        server_factory(storage=SHARED) as a,
        server_factory(storage=SHARED) as b,
    ):
        owner = await a.client()
        session = (await owner.recv())["session_id"]
        await owner.send({"type": "chat", "content": "plan my trip"})
        asked = (await owner.until("agent_request_input"))[-1]
        async with await a.client(session_id=session) as here:
            here_hello = await here.recv()
        async with await b.client(session_id=session) as other:
            other_hello = await other.recv()
            await other.send(
                {
                    "type": "agent_user_input",
                    "content": "Paris",
                    "tool_call_id": asked["tool_call_id"],
                }
            )
            await owner.until("agent_user_answer", timeout=10)
            async with await a.client(session_id=session) as here_after:
                here_after_hello = await here_after.recv()
            async with await b.client(session_id=session) as other_after:
                other_after_hello = await other_after.recv()
        await owner.until("response_complete", timeout=10)
        await owner.close()
    question = {key: asked[key] for key in ("question", "tool_call_id", "step", "expires_at")}
    for hello in (here_hello, other_hello):
        assert (hello["status"], hello["pending_input"]) == ("awaiting_input", question)
        assert hello["pending_approval"] is None
    for hello in (here_after_hello, other_after_hello):
        assert hello["pending_input"] is None and hello["status"] != "awaiting_input"
