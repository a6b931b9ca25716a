"""GET, PATCH and DELETE /api/sessions/{id}: read, rename and delete a conversation, scoped by
caller."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed

from server.storage.base import DeleteOutcome
from server.storage.sqlite import SQLiteStore
from tests.fakes.openai_server import FakeLLM, Reply

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
TOKENS = {ALICE: {"tenant": "acme", "user": "alice"}, BOB: {"tenant": "globex", "user": "bob"}}


async def test_rename_then_delete_a_session(server, fake_llm: FakeLLM):
    async with await server.client() as c:
        sid = (await c.recv())["session_id"]
        await c.run("Plan my trip to Rome")
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        before = (await http.get("/api/sessions")).json()["sessions"][0]
        assert (await http.get(f"/api/sessions/{sid}")).json() == before
        renamed = await http.patch(f"/api/sessions/{sid}", json={"title": "  Rome \n trip  "})
        assert renamed.status_code == 200
        assert renamed.json() == {**before, "title": "Rome trip"}  # updated_at unchanged
        assert (await http.get("/api/sessions")).json()["sessions"][0]["title"] == "Rome trip"
        for bad in ({"title": ""}, {"title": "   "}, {"title": "x" * 201}, {"title": 3}, {}, []):
            response = await http.patch(f"/api/sessions/{sid}", json=bad)
            assert response.status_code == 400, bad
            assert response.json()["code"] == "invalid_body"
        response = await http.patch(f"/api/sessions/{sid}", content=b"{not json")
        assert response.status_code == 400
        huge = b'{"title": "' + b"x" * 100_000 + b'"}'
        response = await http.patch(f"/api/sessions/{sid}", content=huge)
        assert response.status_code == 400 and response.json()["code"] == "invalid_body"
        assert (await http.patch(f"/api/sessions/{sid}", json={"title": "x" * 200})).is_success

        assert (await http.delete(f"/api/sessions/{sid}")).status_code == 204
        assert (await http.get("/api/sessions")).json()["sessions"] == []
        assert (await http.get(f"/api/sessions/{sid}/events")).status_code == 404
        assert (await http.get(f"/api/sessions/{sid}/messages")).status_code == 404
        gone = await http.get(f"/api/sessions/{sid}")
        assert gone.status_code == 404 and gone.json()["code"] == "not_found"
        assert (await http.delete(f"/api/sessions/{sid}")).status_code == 404
        missing = await http.patch(f"/api/sessions/{sid}", json={"title": "again"})
        assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    async with await server.client(session_id=sid) as late:
        assert (await late.recv())["code"] == "session_not_found"


async def test_delete_is_refused_while_a_run_is_active_and_closes_watchers(
    server, fake_llm: FakeLLM
):
    fake_llm.script("reason", Reply(chunks=["Thinking"], hang_after=1))
    async with await server.client() as c:
        sid = (await c.recv())["session_id"]
        await c.send({"type": "chat", "content": "long one"})
        await c.until(lambda f: f.get("update_type") == "agent_reason_delta")
        async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
            refused = await http.delete(f"/api/sessions/{sid}")
            assert refused.status_code == 409 and refused.json()["code"] == "run_in_progress"
            await c.send({"type": "agent_control", "action": "stop"})
            await c.until(lambda f: f.get("type") == "response_complete")
            assert (await http.delete(f"/api/sessions/{sid}")).status_code == 204
        try:  # the page still watching it is told the session is gone
            while True:
                await c.recv()
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 4404


async def test_another_caller_can_neither_read_rename_nor_delete(server_factory, fake_llm: FakeLLM):
    async with server_factory(auth={"tokens": TOKENS}) as s:
        async with await s.client(token=ALICE) as c:
            sid = (await c.recv())["session_id"]
            await c.run("mine")
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            bob = {"Authorization": f"Bearer {BOB}"}
            alice = {"Authorization": f"Bearer {ALICE}"}
            assert (await http.delete(f"/api/sessions/{sid}")).status_code == 401
            assert (await http.delete(f"/api/sessions/{sid}", headers=bob)).status_code == 404
            assert (await http.get(f"/api/sessions/{sid}", headers=bob)).status_code == 404
            assert (await http.get(f"/api/sessions/{sid}")).status_code == 401
            assert (await http.get(f"/api/sessions/{sid}", headers=alice)).json()["title"] == "mine"
            patched = await http.patch(f"/api/sessions/{sid}", json={"title": "x"}, headers=bob)
            assert patched.status_code == 404
            listed = (await http.get("/api/sessions", headers=alice)).json()["sessions"]
            assert [(x["session_id"], x["title"]) for x in listed] == [(sid, "mine")]


class _StoreThatDeletesWhenTold(SQLiteStore):
    """`delete_session` waits for `go` before it deletes (a slow store, made certain)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.deleting = asyncio.Event()
        self.go = asyncio.Event()

    async def delete_session(self, *args: Any, **kwargs: Any) -> DeleteOutcome:
        self.deleting.set()
        await self.go.wait()
        return await super().delete_session(*args, **kwargs)


async def test_a_chat_while_the_session_is_being_deleted_is_refused_and_nothing_is_left(
    server_factory, fake_llm: FakeLLM, tmp_path: Path
):
    """Without the hold, the chat would start a run on a session the delete then removes
    under it: the run ends in `storage_error` (SQLite) or leaves orphaned events (MongoDB)."""
    store = _StoreThatDeletesWhenTold(tmp_path / "deleting.db")
    async with server_factory(store=store) as s, await s.client() as c:
        sid = (await c.recv())["session_id"]
        await c.run("first")
        async with httpx.AsyncClient(base_url=f"http://{s.address}") as http:
            deleting = asyncio.create_task(http.delete(f"/api/sessions/{sid}"))
            await asyncio.wait_for(store.deleting.wait(), 5)
            await c.send({"type": "chat", "content": "second"})
            refused = await c.until("error")
            store.go.set()
            assert (await deleting).status_code == 204
        try:  # then the connection is told the session is gone, with nothing run in between
            while True:
                refused.append(await c.recv())
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 4404
    assert [(f["type"], f.get("code")) for f in refused] == [("error", "run_in_progress")]
    assert "being deleted" in refused[0]["message"]
    with closing(sqlite3.connect(tmp_path / "deleting.db")) as db:
        for table in ("sessions", "events", "messages", "run_slots"):
            rows = db.execute(f"SELECT COUNT(*) FROM {table} WHERE session_id = ?", (sid,))
            assert rows.fetchone() == (0,), table
