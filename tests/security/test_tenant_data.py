"""What one tenant stores must neither block nor reach another (issue 42, LOW 6 and 7), on
SQLite and on MongoDB (FerretDB), with two server instances on one store as two processes.

6: AG-UI thread ids were one namespace: tenant a could take a thread id before tenant b used
it (b got 404), or make again one b had had, and learn which ids others use.
"""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from typing import Any

import httpx
from ag_ui.core import EventType

from server.agui_threads import thread_session
from server.storage.base import Scope
from tests.agui.test_agui import EVENT, post, run_input
from tests.conftest import Running, ServerFactory
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
