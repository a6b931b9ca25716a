"""What one tenant stores must neither block nor reach another (issue 42, LOW 6 and 7), on
SQLite and on MongoDB (FerretDB), with two server instances on one store as two processes.

6: AG-UI thread ids were one namespace: tenant a could take a thread id before tenant b used
it (b got 404), or make again one b had had, and learn which ids others use.
7: no per-tenant storage quota: 130 chats of 1 MB added 570 MB in 52 s.
"""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
from ag_ui.core import EventType

from agent.messages import Message
from server.agui_threads import thread_session
from server.storage.base import Scope
from server.storage.sqlite import SQLiteStore
from tests.agui.test_agui import EVENT, post, run_input
from tests.conftest import Running, ServerFactory
from tests.fakes.client import Client, kind
from tests.fakes.openai_server import FakeLLM, observe, reason
from tests.security.harness import TENANT_TOKENS, bearer
from tests.storage.conftest import Backend

A, B = Scope("a", "alice"), Scope("b", "bob")


def on(backend: Backend) -> dict[str, Any]:
    """The `storage` settings of a server on the test's store."""
    return backend.settings.model_dump(exclude_unset=True)


def answers(fake_llm: FakeLLM, *finals: str) -> None:
    fake_llm.script("reason", *[reason("Quick.", finish=True) for _ in finals])
    fake_llm.script("observe", *[observe("ok", final=final) for final in finals])


async def connect(address: str, thread: str, tenant: str) -> list[Any]:
    """POST /agui/connect: every event of the stream."""
    events = []
    async with httpx.AsyncClient(timeout=10) as http:
        url = f"http://{address}/agui/connect"
        body = run_input(thread, "ignored")
        async with http.stream("POST", url, json=body, headers=bearer(tenant)) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(EVENT.validate_json(line[6:]))
    return events


async def servers(stack: AsyncExitStack, factory: ServerFactory, backend: Backend) -> list[Running]:
    """Two server instances on the test's store, as two processes would be."""
    return [
        await stack.enter_async_context(
            factory(auth={"tokens": TENANT_TOKENS}, storage=on(backend))
        )
        for _ in range(2)
    ]


async def test_a_thread_id_is_each_tenants_own(
    server_factory: ServerFactory, fake_llm: FakeLLM, backend: Backend
) -> None:
    """Tenant a uses thread "x" first (on one process); tenant b's "x" (on the other) is a
    thread of his own: it runs, he reconnects to it and stops it as his, and neither sees a
    word of the other's. Each /ws and /api session is the thread's derived id."""
    answers(fake_llm, "a's answer", "b's answer")
    thread = f"x-{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        first, second = await servers(stack, server_factory, backend)
        mine = await post(first.address, run_input(thread, "a's secret"), **bearer("a"))
        theirs = await post(second.address, run_input(thread, "b's question"), **bearer("b"))
        assert mine[-1].result["final_answer"] == "a's answer"
        assert theirs[-1].type == EventType.RUN_FINISHED, theirs[-1]
        assert theirs[-1].result["final_answer"] == "b's answer"
        assert {e.thread_id for e in theirs if hasattr(e, "thread_id")} == {thread}
        raw = [e.raw_event for e in theirs if e.raw_event]
        assert {f["session_id"] for f in raw} == {thread_session(B, thread)}

        snapshots = {
            tenant: [
                e
                for e in await connect(address, thread, tenant)
                if e.type.value == "MESSAGES_SNAPSHOT"
            ]
            for tenant, address in (("a", second.address), ("b", first.address))
        }
        said = {t: [m.content for m in s[0].messages] for t, s in snapshots.items()}
        assert said == {"a": ["a's secret", "a's answer"], "b": ["b's question", "b's answer"]}

        async with httpx.AsyncClient(base_url=f"http://{first.address}", timeout=10) as http:
            stop = await http.post(f"/agui/{thread}/stop", headers=bearer("b"))
            assert stop.status_code == 409 and stop.json()["code"] == "no_active_run"  # his
            for tenant, scope in (("a", A), ("b", B)):
                listed = (await http.get("/api/sessions", headers=bearer(tenant))).json()
                assert [s["session_id"] for s in listed["sessions"]] == [
                    thread_session(scope, thread)
                ]


async def test_a_deleted_thread_is_made_again_only_for_its_tenant(
    server_factory: ServerFactory, fake_llm: FakeLLM, backend: Backend
) -> None:
    """Tenant b had thread "x" and deleted it; tenant a's "x" (before and after) is not it,
    and b's next "x" is a new, empty thread of his."""
    answers(fake_llm, "b's first", "a's", "b's second")
    thread = f"x-{uuid.uuid4().hex[:8]}"
    async with AsyncExitStack() as stack:
        first, second = await servers(stack, server_factory, backend)
        await post(first.address, run_input(thread, "b's old words"), **bearer("b"))
        async with httpx.AsyncClient(base_url=f"http://{first.address}", timeout=10) as http:
            gone = await http.delete(
                f"/api/sessions/{thread_session(B, thread)}", headers=bearer("b")
            )
            assert gone.status_code in (200, 204), gone.text
        mine = await post(second.address, run_input(thread, "a's words"), **bearer("a"))
        again = await post(second.address, run_input(thread, "b's new words"), **bearer("b"))
        assert mine[-1].type == again[-1].type == EventType.RUN_FINISHED
        (snapshot,) = [
            e
            for e in await connect(first.address, thread, "b")
            if e.type.value == "MESSAGES_SNAPSHOT"
        ]
        assert [m.content for m in snapshot.messages] == ["b's new words", "b's second"]


# -- 7: a storage quota per tenant -----------------------------------------------------------


async def test_stored_bytes_are_counted_per_tenant_and_go_with_a_deleted_session(
    backend: Backend,
) -> None:
    """Each tenant's figure is the bytes of her events and messages as stored, seen alike
    by another store client on the data (another process); a deleted session's go with it.
    (MongoDB adds a session's bytes with its next write of the session: a run's status.)"""
    store, other = backend.new_store(), backend.new_store()
    await store.open()
    await other.open()
    try:
        sizes: dict[str, int] = {}
        for scope, session, words in ((A, "sa", 3_000), (A, "sa2", 100), (B, "sb", 50)):
            await store.create_session(scope, session, 1)
            frames = [{"type": "agent_update", "seq": 0, "text": "w" * words} for _ in range(3)]
            bodies = await store.append_events(scope, session, frames, 2)
            await store.append_messages(scope, session, [Message("user", "m" * words)], 3)
            await store.update_session(scope, session, 4, status="idle")
            stored, _ = await store.read_messages(scope, session, 10, None)
            size = sum(map(len, bodies)) + sum(len(orjson.dumps(m)) for m in stored)
            sizes[scope.tenant_id] = sizes.get(scope.tenant_id, 0) + size
        assert sizes["a"] > 9_000
        assert await other.stored_bytes() == sizes
        assert await other.stored_bytes("b") == {"b": sizes["b"]}
        assert await store.delete_session(A, "sa", 5) == "deleted"
        left = await other.stored_bytes()
        assert left["b"] == sizes["b"] and 0 < left["a"] < 2_000
    finally:
        await store.close()
        await other.close()


async def chat(client: Client, content: str) -> dict[str, Any]:
    """Send a chat: its run's last frame, or the error that refused it."""
    await client.send({"type": "chat", "content": content, "agent_mode": False})
    frames = await client.until(lambda f: kind(f) in ("response_complete", "error"), 20)
    return frames[-1]


async def test_a_tenant_at_her_quota_starts_no_run_and_the_other_tenant_goes_on(
    server_factory: ServerFactory, backend: Backend
) -> None:
    """Tenant a chats 8 KB messages until her conversations pass a 30 KB quota: her next
    chat (/ws, and AG-UI) is refused with `storage_quota_exceeded`, nothing stored for it;
    tenant b chats on; /metrics shows each tenant her figure and the operator every one;
    once a deletes a conversation she may chat again."""
    limit = 30_000
    storage = {**on(backend), "max_bytes_per_tenant": limit}
    async with AsyncExitStack() as stack:
        running = await stack.enter_async_context(
            server_factory(auth={"tokens": TENANT_TOKENS}, storage=storage)
        )
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=f"http://{running.address}", timeout=10)
        )
        a = await stack.enter_async_context(
            await Client.connect(running.address, headers=bearer("a"))
        )
        session = (await a.recv())["session_id"]
        chats = 0
        while kind(last := await chat(a, "x" * 8_000)) == "response_complete":
            chats += 1
            assert chats < 10, "the quota never held"
        assert last["code"] == "storage_quota_exceeded", last
        assert f"its quota is {limit:,}" in last["message"]
        assert chats >= 2  # 8 KB chats store a little more than twice that: events, messages
        refused = await http.post("/agui", json=run_input("new-thread", "hi"), headers=bearer("a"))
        assert refused.status_code == 507 and refused.json()["code"] == "storage_quota_exceeded"
        mine = (await http.get("/api/sessions", headers=bearer("a"))).json()["sessions"]
        assert [s["session_id"] for s in mine] == [session]  # the AG-UI thread was not made

        async with await Client.connect(running.address, headers=bearer("b")) as b:
            await b.recv()
            assert kind(await chat(b, "y" * 8_000)) == "response_complete"

        used = (await http.get("/metrics", headers=bearer("a"))).json()
        assert used["scope"] == "tenant" and used["stored_bytes"] >= limit
        text = (await http.get("/metrics?format=prometheus", headers=bearer("operator"))).text
        assert f'agent_server_stored_bytes{{tenant="a"}} {float(used["stored_bytes"])}' in text
        assert 'agent_server_stored_bytes{tenant="b"}' in text

        await a.close()
        gone = await http.delete(f"/api/sessions/{session}", headers=bearer("a"))
        assert gone.status_code == 204, gone.text
        async with await Client.connect(running.address, headers=bearer("a")) as again:
            await again.recv()
            assert kind(await chat(again, "back")) == "response_complete"


async def test_a_file_written_before_counts_existed_is_counted_once_opened(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    await store.open()
    await store.create_session(A, "s", 1)
    bodies = await store.append_events(A, "s", [{"type": "x", "seq": 0, "t": "w" * 500}], 2)
    counted = await store.stored_bytes()
    await store.close()
    with sqlite3.connect(path) as conn:  # as the file was before: no counts, no triggers
        conn.execute("DROP TRIGGER events_count_bytes")
        conn.execute("DROP TRIGGER messages_count_bytes")
        conn.execute("ALTER TABLE sessions DROP COLUMN bytes")
    conn.close()
    again = SQLiteStore(path)
    await again.open()
    try:
        assert await again.stored_bytes() == counted == {"a": len(bodies[0])}
        await again.append_events(A, "s", [{"type": "x", "seq": 0}], 3)
        assert (await again.stored_bytes())["a"] > len(bodies[0])  # counted from now on
    finally:
        await again.close()
