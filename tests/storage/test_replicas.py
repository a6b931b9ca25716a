"""Any replica serves any session: two real server processes on one store, real sockets.

Each test starts two `python -m server` processes on the same SQLite file (`storage.shared`)
or the same MongoDB database (FerretDB), runs a session on the first and drives it through
the second: the second follows the run live (replayed from 0, then every later event, no gap
and no duplicate), stops it, answers its question (exactly one of two concurrent answers
wins), and closes it as `interrupted` when the first is killed mid-run; its watchers are
closed (4404) when the first deletes the session, and an answer it passes on shows there at
once. `serve --workers 2` is tested behind HAProxy (test_load_balancer.py).
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from server.agui_threads import thread_session
from server.storage.base import Scope
from tests.fakes.client import Client, Frame, kind
from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason
from tests.fakes.processes import free_port, start_server_process
from tests.storage.conftest import drop_database

pytestmark = pytest.mark.slow

LEASE_S = 1.0


@dataclass
class Replicas:
    addresses: list[str]
    procs: list[asyncio.subprocess.Process]

    async def client(self, index: int, **params: object) -> Client:
        return await Client.connect(self.addresses[index], **params)

    async def chat(self, index: int, content: str) -> tuple[Client, str]:
        """A new session on process `index`, its first chat sent: the client and its id."""
        client = await self.client(index)
        session = (await client.recv())["session_id"]
        await client.send({"type": "chat", "content": content})
        return client, session


@pytest.fixture(params=["sqlite", "mongodb"])
def store_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {
            "AGENT__STORAGE__SQLITE_PATH": str(tmp_path / "agent.db"),
            "AGENT__STORAGE__SHARED": "true",
        }
        return
    uri: str = request.getfixturevalue("mongodb_uri")
    database = f"replicas_{uuid.uuid4().hex[:12]}"
    yield {
        "AGENT__STORAGE__BACKEND": "mongodb",
        "AGENT__STORAGE__MONGODB_URI": uri,
        "AGENT__STORAGE__MONGODB_DATABASE": database,
    }
    drop_database(uri, database)


@asynccontextmanager
async def replicas(
    tmp_path: Path,
    fake_llm: FakeLLM,
    store_env: dict[str, str],
    count: int = 2,
    each: list[dict[str, str]] | None = None,
) -> AsyncIterator[Replicas]:
    """`count` server processes on one store; `each[i]` adds settings for process i."""
    env = {
        **store_env,
        "AGENT__LLM__BASE_URL": fake_llm.base_url,  # type: ignore[attr-defined]
        "AGENT__LLM__MAX_RETRIES": "0",
        "AGENT__STORAGE__RUN_LEASE_S": str(LEASE_S),
        "AGENT__AGENT__MAX_CONCURRENT_RUNS_PER_TENANT": "1",
    }
    ports = [free_port() for _ in range(count)]
    extra = each or [{} for _ in ports]
    procs = list(
        await asyncio.gather(
            *(
                start_server_process(tmp_path, port, {**env, **more})
                for port, more in zip(ports, extra, strict=True)
            )
        )
    )
    try:
        yield Replicas([f"127.0.0.1:{p}" for p in ports], procs)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 20)


def seqs(frames: list[Frame]) -> list[int]:
    return [f["seq"] for f in frames if "seq" in f]


async def test_the_second_process_follows_answers_stops_and_outlives_runs_of_the_first(
    fake_llm: FakeLLM, tmp_path: Path, store_env: dict[str, str]
) -> None:
    question = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script(
        "reason",
        Reply(chunks=[f"w{i} " for i in range(15)], delay_s=0.03),
        Reply(chunks=["thinking ", "hard"], hang_after=1),
        reason("I can answer this directly."),
        Reply(chunks=["once ", "more"], hang_after=1),
    )
    fake_llm.script("act", act(question))
    fake_llm.script("observe", observe("Got the city."))
    async with replicas(tmp_path, fake_llm, store_env) as group:
        a, session = await group.chat(0, "plan a trip")
        await a.until("agent_reason_delta")

        b = await group.client(1, session_id=session, after_seq=0)
        hello = await b.recv()
        followed = await b.until("agent_request_input", timeout=10)
        await a.until("agent_request_input", timeout=10)

        # The tenant's one run (its limit) is on the first process: the second refuses more.
        async with await group.client(1) as other:
            await other.recv()
            await other.send({"type": "chat", "content": "another session"})
            refused_other = await other.recv()
        await b.send({"type": "chat", "content": "this session again"})
        refused_same = await b.recv()

        # Two answers at once, one per process: exactly one is taken.
        a2 = await group.client(0, session_id=session)
        await a2.recv()
        await asyncio.gather(
            a2.send({"type": "agent_user_input", "content": "Paris"}),
            b.send({"type": "agent_user_input", "content": "Rome"}),
        )
        # The run goes on to step 2, whose reasoning hangs; stop it through the second.
        on_b = await b.until(lambda f: kind(f) == "agent_reason_delta" and f["step"] == 2, 10)
        await b.send({"type": "agent_control", "action": "stop"})
        on_b += await b.until("response_complete", timeout=10)
        await a.until("response_complete", timeout=10)
        on_a = a.seen[1:]
        a2_frames = await a2.until("response_complete", timeout=10)
        await fake_llm.wait_disconnects(1)

        # Afterwards the second process starts the next run of the session itself.
        more = await b.run("and now?", timeout=10)

        # A run of the first process, which is then killed: the second closes the run
        # ("interrupted") once the lease expires, and its watcher sees that.
        await a.send({"type": "chat", "content": "one more"})
        await b.until("agent_reason_delta", timeout=10)
        group.procs[0].send_signal(signal.SIGKILL)
        await group.procs[0].wait()
        tail = await b.until("response_complete", timeout=2 * LEASE_S + 5)  # two leases, a tick
        await asyncio.gather(a.close(), a2.close(), b.close())

    assert (hello["status"], hello["resumed"]) == ("running", True)
    live_b = followed + on_b
    assert seqs(live_b) == list(range(1, len(seqs(live_b)) + 1))  # from 1, no gap, no repeat
    assert [f for f in live_b if "seq" in f] == on_a  # the same frames, byte for byte as JSON
    assert kind(on_a[-2]) == "agent_stopped" and on_a[-2]["reason"] == "user"
    assert refused_other["code"] == "too_many_runs"
    assert refused_same["code"] == "run_in_progress"
    errors = [f for f in b.seen + a2.seen if f["type"] == "error" and f is not refused_same]
    assert [e["code"] for e in errors] == ["not_awaiting_input"], errors
    winner = "Rome" if errors[0] in a2.seen else "Paris"
    act_request = [r for r in fake_llm.requests if r.phase == "reason"][1]
    tool = [m["content"] for m in act_request.body["messages"] if m["role"] == "tool"]
    loser = {"Paris": "Rome", "Rome": "Paris"}[winner]
    assert len(tool) == 1 and winner in tool[0] and loser not in tool[0]
    assert kind(a2_frames[-1]) == "response_complete"
    assert seqs(more)[0] == on_a[-1]["seq"] + 1 and kind(more[-2]) == "agent_completion"
    assert [kind(f) for f in tail[-2:]] == ["agent_stopped", "response_complete"]
    assert tail[-2]["reason"] == "interrupted"
    assert seqs(b.seen[1:]) == list(range(1, len(seqs(b.seen[1:])) + 1))


async def closed_with(client: Client, timeout: float = 5.0) -> int | None:
    """Receive until the server closes the connection; its close code."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                await client.recv(timeout)
    except ConnectionClosed as closed:
        return None if closed.rcvd is None else closed.rcvd.code


async def test_a_deletion_on_one_process_closes_the_watchers_on_the_other(
    fake_llm: FakeLLM, tmp_path: Path, store_env: dict[str, str]
) -> None:
    """Deleted as soon as the run ended: the watching process (polling every 2 s here) has
    not seen the run's end, and never will, since its events are gone with the session."""
    fake_llm.script("reason", Reply(chunks=[f"w{i} " for i in range(10)], delay_s=0.05))
    slow_follower = [{}, {"AGENT__STORAGE__POLL_INTERVAL_S": "2"}]
    async with replicas(tmp_path, fake_llm, store_env, each=slow_follower) as group:
        a, session = await group.chat(0, "a short one")
        await a.until("agent_reason_delta")
        b = await group.client(1, session_id=session)
        hello = await b.recv()
        await a.until("response_complete", timeout=10)
        async with httpx.AsyncClient(base_url=f"http://{group.addresses[0]}") as http:
            deleted = await http.delete(f"/api/sessions/{session}")
        assert deleted.status_code == 204, deleted.text  # else nothing closes the watchers
        # FerretDB under a loaded CI may need several polls: the bounds are generous, not goals
        # (the deleting process's own watcher once took over 5 s in a full parallel run).
        local, remote = await asyncio.gather(closed_with(a, timeout=30), closed_with(b, timeout=30))
        async with await group.client(1, session_id=session) as late:
            refused = await late.recv()

    assert (hello["status"], deleted.status_code) == ("running", 204)
    assert (local, remote) == (4404, 4404)
    assert refused.get("code") == "session_not_found", refused


async def test_a_connection_to_another_process_right_after_a_deletion_is_refused(
    fake_llm: FakeLLM, tmp_path: Path, store_env: dict[str, str]
) -> None:
    """The watching process (polling every 5 s here) has not noticed the deletion yet when a
    new connection asks it for the session: it checks the store, refuses like any unknown
    id, and closes its watcher with 4404 then, not a poll later."""
    fake_llm.script("reason", reason("Short."))
    slow_follower = [{}, {"AGENT__STORAGE__POLL_INTERVAL_S": "5"}]
    async with replicas(tmp_path, fake_llm, store_env, each=slow_follower) as group:
        a, session = await group.chat(0, "a short one")
        await a.until("response_complete", timeout=10)
        b = await group.client(1, session_id=session)
        await b.recv()
        async with httpx.AsyncClient(base_url=f"http://{group.addresses[0]}") as http:
            deleted = await http.delete(f"/api/sessions/{session}")
        assert deleted.status_code == 204, deleted.text
        async with await group.client(1, session_id=session) as late:
            refused = await late.recv()
        watcher = await closed_with(b, timeout=4)  # before the next poll: not the relay

    assert refused.get("code") == "session_not_found", refused
    assert watcher == 4404


async def test_an_answer_through_the_watching_process_shows_there_at_once(
    fake_llm: FakeLLM, tmp_path: Path, store_env: dict[str, str]
) -> None:
    """The watching process polls every 5 s here: its status cannot come from the run's
    next event, only from the answer it passed on."""
    question = FakeToolCall("request_input", {"question": "Which city?"})
    fake_llm.script("act", act(question))
    fake_llm.script("observe", observe("Got the city."))
    fake_llm.script("reason", reason("Ask where."), Reply(chunks=["hm "], hang_after=1))
    slow_follower = [{}, {"AGENT__STORAGE__POLL_INTERVAL_S": "5"}]
    async with replicas(tmp_path, fake_llm, store_env, each=slow_follower) as group:
        a, session = await group.chat(0, "plan a trip")
        await a.until("agent_request_input", timeout=10)
        b = await group.client(1, session_id=session)
        before = await b.recv()
        answer = {"type": "agent_user_input", "content": "Paris"}
        await b.send({**answer, "tool_call_id": "call_of_another_question"})  # refused
        await b.send({**answer, "tool_call_id": question.id})
        await b.send({"type": "no_such_frame"})  # frames are handled in order: a marker
        await b.until(lambda f: f.get("code") == "unknown_type")
        async with await group.client(1, session_id=session) as later:
            after = await later.recv()
        await a.until("agent_user_answer", timeout=10)
        await a.send({"type": "agent_control", "action": "stop"})
        await a.until("response_complete", timeout=10)
        await asyncio.gather(a.close(), b.close())

    assert (before["status"], before["pending_input"]["question"]) == (
        "awaiting_input",
        "Which city?",
    )
    errors = [f for f in b.seen if f["type"] == "error"]
    assert [f["code"] for f in errors] == ["not_awaiting_input", "unknown_type"]
    assert question.id in errors[0]["message"]  # names the question that is waiting
    assert (after["status"], after["pending_input"]) == ("running", None)


async def test_a_session_made_again_under_a_deleted_id_is_not_sent_to_the_old_watcher(
    fake_llm: FakeLLM, tmp_path: Path, store_env: dict[str, str]
) -> None:
    """Alice watches her AG-UI thread on process 1 and deletes it through process 0; Bob
    (another tenant) then starts a thread with the same thread id on process 0 (a session of
    his own). Process 1 closes Alice's watcher as deleted and sends her no frame of Bob's
    conversation."""
    tokens = {
        "alice-token-0123456789": {"tenant": "acme", "user": "alice"},
        "bob-token-0123456789": {"tenant": "other", "user": "bob"},
    }
    alice = {"Authorization": "Bearer alice-token-0123456789"}
    bob = {"Authorization": "Bearer bob-token-0123456789"}
    thread = f"support-{uuid.uuid4().hex[:8]}"
    body = {
        "threadId": thread,
        "runId": "r1",
        "state": None,
        "tools": [],
        "context": [],
        "forwardedProps": {"agent_mode": False},
        "messages": [{"id": "m1", "role": "user", "content": "My IBAN is DE89 3704."}],
    }
    alices = thread_session(Scope("acme", "alice"), thread)
    ids = {alices, thread_session(Scope("other", "bob"), thread)}
    env = store_env | {"AGENT__AUTH__TOKENS": json.dumps(tokens)}
    async with replicas(tmp_path, fake_llm, env) as group:
        async with httpx.AsyncClient(base_url=f"http://{group.addresses[0]}", timeout=30) as http:
            assert (await http.post("/agui", json=body, headers=alice)).status_code == 200
            watcher = await Client.connect(group.addresses[1], headers=alice, session_id=alices)
            assert (await watcher.recv())["resumed"] is True
            deleted = await http.delete(f"/api/sessions/{alices}", headers=alice)
            assert deleted.status_code == 204, deleted.text
            assert (await http.post("/agui", json=body, headers=bob)).status_code == 200
        seen: list[Frame] = []
        try:
            async with asyncio.timeout(30):
                while True:
                    seen.append(await watcher.recv(30))
        except ConnectionClosed as closed:
            code = None if closed.rcvd is None else closed.rcvd.code
    assert code == 4404
    assert [f for f in seen if f.get("session_id") in ids] == [], seen


async def test_a_paused_process_writes_nothing_more_of_a_run_another_closed(
    fake_llm: FakeLLM, tmp_path: Path, store_env: dict[str, str]
) -> None:
    """Process 0 is paused (SIGSTOP: a frozen VM, a long partition) mid-run for longer than
    its lease, and process 1 closes the run as `interrupted`. Resumed, process 0 finds out
    that it lost the run before it writes again: the stored run has one end and nothing
    after it, and process 0's watchers are told to reconnect (1012) and read the store."""
    fake_llm.script("reason", Reply(chunks=[f"w{i} " for i in range(400)], delay_s=0.02))
    async with replicas(tmp_path, fake_llm, store_env) as group:
        owner, session = await group.chat(0, "go")
        await owner.until("agent_reason_delta", timeout=10)
        watcher = await group.client(1, session_id=session)
        await watcher.recv()
        group.procs[0].send_signal(signal.SIGSTOP)
        try:
            tail = await watcher.until("response_complete", timeout=2 * LEASE_S + 10)
        finally:
            group.procs[0].send_signal(signal.SIGCONT)
        code = None
        try:
            async with asyncio.timeout(20):
                while True:
                    await owner.recv(20)
        except ConnectionClosed as closed:
            code = None if closed.rcvd is None else closed.rcvd.code
        await watcher.close()
        async with httpx.AsyncClient(base_url=f"http://{group.addresses[1]}") as http:
            events = (await http.get(f"/api/sessions/{session}/events")).json()["events"]
    run_id = tail[-1]["run_id"]
    assert [kind(f) for f in tail[-2:]] == ["agent_stopped", "response_complete"]
    ends = [f for f in events if f["type"] == "response_complete"]
    assert [f["run_id"] for f in ends] == [run_id] and events[-1] == ends[0]  # nothing after
    assert [f["seq"] for f in events] == list(range(1, len(events) + 1))
    assert code == 1012
