"""Versions of a turn over the wire, on both stores (docs/wire-protocol.md, "Versions of a
turn"): an edit or a regeneration is a new version beside the run it replaces, the model
reads only the shown path, a switch is stored and sent to every tab, and a replay (from
`after_seq` or from a fresh connection) and `/messages` follow it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.conftest import Running, ServerFactory
from tests.fakes.client import Client, Frame, kind
from tests.fakes.openai_server import FakeLLM, observe, text
from tests.storage.conftest import Backend

CHAT = {"agent_mode": False}


def storage_of(backend: Backend) -> dict[str, Any]:
    s = backend.settings
    if backend.name == "sqlite":
        return {"backend": "sqlite", "sqlite_path": str(s.sqlite_path)}
    return {
        "backend": "mongodb",
        "mongodb_uri": s.mongodb_uri,
        "mongodb_database": s.mongodb_database,
    }


@pytest.fixture
async def running(server_factory: ServerFactory, backend: Backend) -> AsyncIterator[Running]:
    async with server_factory(storage=storage_of(backend)) as server:
        yield server


def said(fake_llm: FakeLLM, index: int = -1) -> list[str]:
    """What the model read in one chat-mode request: its messages' texts, the system one left
    out."""
    chats = [r for r in fake_llm.requests if r.phase == "chat"]
    return [m["content"] for m in chats[index].body["messages"][1:]]


async def chat(c: Client, content: str, **fields: Any) -> tuple[str, list[Frame]]:
    frames = await c.run(content, **CHAT, **fields)
    return frames[0]["run_id"], frames


async def messages(server: Running, session: str, query: str = "") -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=f"http://{server.address}") as http:
        reply = await http.get(f"/api/sessions/{session}/messages{query}")
    assert reply.status_code == 200
    body: dict[str, Any] = reply.json()
    return body


def texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"]]


async def test_an_edit_is_a_new_version_and_the_model_reads_only_the_shown_one(
    running: Running, fake_llm: FakeLLM
) -> None:
    fake_llm.script("chat", text("Paris."), text("Rome."), text("Madrid."), text("Done."))
    async with await running.client() as c:
        session = (await c.recv())["session_id"]
        first, _ = await chat(c, "capital of France?")
        second, _ = await chat(c, "capital of Italy?")
        edited, frames = await chat(c, "capital of Spain?", replaces=second)
        assert said(fake_llm) == ["capital of France?", "Paris.", "capital of Spain?"]
        echo = frames[0]
        assert kind(echo) == "agent_user_message"
        assert (echo["parent_run_id"], echo["replaces"]) == (first, second)

        body = await messages(running, session)
        assert texts(body) == ["capital of France?", "Paris.", "capital of Spain?", "Madrid."]
        assert body["total"] == 4 and body["active_path"] == [first, edited]
        asked = body["messages"][2]
        assert (asked["versions"], asked["version_index"]) == ([second, edited], 1)
        assert "versions" not in body["messages"][0]  # one version only
        # pages count the shown messages only
        last = await messages(running, session, "?limit=1")
        assert texts(last) == ["Madrid."] and last["total"] == 4
        since = body["messages"][1]["ts"] - 1
        after = await messages(running, session, f"?since={since}&limit=2")
        assert after["messages"] == [m for m in body["messages"] if m["ts"] > since][:2]
        assert "capital of Italy?" not in texts(after)

        # The next turn follows the shown version, not the one stored last.
        await chat(c, "and its river?")
        assert said(fake_llm) == [
            "capital of France?",
            "Paris.",
            "capital of Spain?",
            "Madrid.",
            "and its river?",
        ]


async def test_regenerating_the_first_answer_hides_everything_after_it(
    running: Running, fake_llm: FakeLLM
) -> None:
    fake_llm.script("chat", text("One."), text("Two."), text("Uno."))
    async with await running.client() as c:
        session = (await c.recv())["session_id"]
        first, _ = await chat(c, "count")
        await chat(c, "again")
        again, frames = await chat(c, "count", replaces=first)
        assert frames[0]["parent_run_id"] is None  # the first turn has no run before it
        assert said(fake_llm) == ["count"]
    body = await messages(running, session)
    assert texts(body) == ["count", "Uno."]
    assert body["messages"][0]["versions"] == [first, again]


async def test_a_switch_is_stored_sent_to_every_tab_and_followed_by_replays(
    running: Running, fake_llm: FakeLLM
) -> None:
    fake_llm.script("chat", text("Paris."), text("Rome."), text("Madrid."), text("The Po."))
    async with await running.client() as c:
        session = (await c.recv())["session_id"]
        first, _ = await chat(c, "capital of France?")
        second, _ = await chat(c, "capital of Italy?")
        edited, _ = await chat(c, "capital of Spain?", replaces=second)
        before_switch = c.seen[-1]["seq"]
        async with await running.client(session_id=session) as tab:
            hello = await tab.recv()
            assert hello["active_path"] == [first, edited]
            await c.send({"type": "select_version", "run_id": second, "id": "s1"})
            switched = await c.until("active_path")
            told = await tab.until("active_path")
        assert switched[-1] == told[-1]
        event = told[-1]
        assert event["active_path"] == [first, second] and event["selected"] == second
        assert event["id"] == "s1" and event["seq"] == before_switch + 1
        assert "run_id" not in event  # not a run's event: nobody takes it for a run going on

        body = await messages(running, session)
        assert texts(body)[2:] == ["capital of Italy?", "Rome."]
        assert body["messages"][2]["version_index"] == 0
        river, frames = await chat(c, "and its river?")
        assert frames[0]["parent_run_id"] == second
        assert said(fake_llm)[2:] == ["capital of Italy?", "Rome.", "and its river?"]

    # A client that missed the switch gets it in its replay, in order, gap-free.
    async with await running.client(session_id=session, after_seq=before_switch) as late:
        hello = await late.recv()
        assert hello["active_path"] == [first, second, river]
        replayed = await late.until("response_complete")
    assert kind(replayed[0]) == "active_path"
    assert [f["seq"] for f in replayed] == list(range(before_switch + 1, hello["last_seq"] + 1))
    # A fresh connection replaying everything sees every version and every switch.
    async with await running.client(session_id=session, after_seq=0) as fresh:
        hello = await fresh.recv()
        assert hello["active_path"] == [first, second, river]
        everything = [await fresh.recv() for _ in range(hello["last_seq"])]
    assert [f["seq"] for f in everything] == list(range(1, hello["last_seq"] + 1))
    runs = [f["run_id"] for f in everything if kind(f) == "agent_user_message"]
    assert runs == [first, second, edited, river]
    assert [f["active_path"] for f in everything if kind(f) == "active_path"] == [[first, second]]

    # Switching back shows below the turn what was shown there last.
    async with await running.client(session_id=session) as c:
        await c.recv()
        await c.send({"type": "select_version", "run_id": edited})
        assert (await c.until("active_path"))[-1]["active_path"] == [first, edited]
        await c.send({"type": "select_version", "run_id": second})
        assert (await c.until("active_path"))[-1]["active_path"] == [first, second, river]


async def test_bad_version_requests_are_refused_and_change_nothing(
    running: Running, fake_llm: FakeLLM
) -> None:
    fake_llm.script(
        "chat",
        text("Paris."),
        text("Rome."),
        text("Madrid."),
        text("Slow", " and never done", hang_after=1),
    )
    async with await running.client() as c:
        session = (await c.recv())["session_id"]
        first, _ = await chat(c, "capital of France?")
        second, _ = await chat(c, "capital of Italy?")
        await c.send({"type": "chat", "content": "x", "replaces": "nope", "id": "e1"})
        refused = (await c.until("error"))[-1]
        assert (refused["code"], refused["id"]) == ("unknown_run", "e1")
        await c.send({"type": "select_version", "run_id": "nope"})
        assert (await c.until("error"))[-1]["code"] == "unknown_run"
        await c.send({"type": "select_version"})
        assert (await c.until("error"))[-1]["code"] == "invalid_message"
        await c.send({"type": "select_version", "run_id": 5})
        assert (await c.until("error"))[-1]["code"] == "invalid_message"
        edited, _ = await chat(c, "capital of Spain?", replaces=second)
        # a version that is not shown cannot be replaced
        await c.send({"type": "chat", "content": "y", "replaces": second, **CHAT})
        assert (await c.until("error"))[-1]["code"] == "unknown_run"
        await c.send({"type": "chat", "content": "slow one", **CHAT})
        await c.until("chat_delta")
        await c.send({"type": "select_version", "run_id": second})
        assert (await c.until("error"))[-1]["code"] == "run_in_progress"
        await c.send({"type": "agent_control", "action": "stop"})
        await c.until("response_complete")
    body = await messages(running, session)
    assert texts(body)[:3] == ["capital of France?", "Paris.", "capital of Spain?"]
    assert body["active_path"][:2] == [first, edited]


async def test_a_continuation_belongs_to_its_turn_and_leaves_with_it(
    running: Running, fake_llm: FakeLLM
) -> None:
    """Continue still extends the same turn: its run follows the one it continues, and a new
    version of that turn hides both."""
    fake_llm.script("observe", observe("Half way."), observe("Done.", final="All of it."))
    fake_llm.script("summarize", text("Half of it."))
    fake_llm.script("chat", text("Short answer."))
    async with await running.client() as c:
        session = (await c.recv())["session_id"]
        first = await c.run("research it", agent_max_steps=1)
        assert first[-2]["stop_reason"] == "max_steps"
        await c.send({"type": "agent_control", "action": "continue"})
        more = await c.until("response_complete")
        echo = more[0]
        assert (echo["origin"], echo["parent_run_id"]) == ("continue", first[0]["run_id"])
        assert more[-2]["final_answer"] == "All of it."
        body = await messages(running, session)
        assert body["active_path"] == [first[0]["run_id"], echo["run_id"]]
        again, _ = await chat(c, "research it, briefly", replaces=first[0]["run_id"])
        assert said(fake_llm) == ["research it, briefly"]
    body = await messages(running, session)
    assert texts(body) == ["research it, briefly", "Short answer."]
    assert body["messages"][0]["versions"] == [first[0]["run_id"], again]


async def test_the_shown_versions_outlive_a_restart(
    server_factory: ServerFactory, backend: Backend, fake_llm: FakeLLM
) -> None:
    fake_llm.script("chat", text("Paris."), text("Rome."))
    async with server_factory(storage=storage_of(backend)) as server, await server.client() as c:
        session = (await c.recv())["session_id"]
        first, _ = await chat(c, "France?")
        edited, _ = await chat(c, "Italy?", replaces=first)
        await c.send({"type": "select_version", "run_id": first})
        await c.until("active_path")
    async with server_factory(storage=storage_of(backend)) as again:
        async with await again.client(session_id=session) as c:
            assert (await c.recv())["active_path"] == [first]
        body = await messages(again, session)
    assert texts(body) == ["France?", "Paris."]
    assert body["messages"][0]["versions"] == [first, edited]
