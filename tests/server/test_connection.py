"""Connection: a stop overtakes the deltas its client has not been sent yet, if many wait;
attaching to a session neither repeats nor drops a frame around the replay."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import orjson
from starlette.websockets import WebSocket

from agent.errors import StorageError
from agent.events import (
    AgentEvent,
    AnswerDelta,
    ChatDelta,
    ChatDone,
    ReasonDelta,
    RunStopped,
    ThinkingDelta,
    ToolStarted,
)
from server import ws
from server.connection import FRAMES_PER_TURN, OVERTAKE_AFTER, Connection
from server.events import Event, RunEnded, ServerEvent
from server.ws import _attach


class _Socket:
    def __init__(self) -> None:
        self.sent: list[str] = []
        self.closed: int | None = None

    async def send_text(self, text: str) -> None:
        self.sent.append(text)

    async def close(self, code: int) -> None:
        self.closed = code


def _frame(event: AgentEvent | ServerEvent, seq: int) -> tuple[str, int, Event]:
    """What a session delivers of `event`, stored at `seq`."""
    sent = Event(event, "s", "r", 1, seq)
    return orjson.dumps(sent.frame()).decode(), seq, sent


def _kinds(sent: list[str]) -> list[str]:
    return [orjson.loads(t).get("update_type") or orjson.loads(t)["type"] for t in sent]


async def _drain(conn: Connection, socket: _Socket) -> list[str]:
    conn.finish(1000)
    await conn.write_forever()
    assert socket.closed == 1000
    return _kinds(socket.sent)


async def test_a_stop_leaves_out_stale_deltas_but_every_other_frame_in_order():
    socket = _Socket()
    conn = Connection(cast(WebSocket, socket), 10_000)
    seq = 0
    for _ in range(OVERTAKE_AFTER + 50):
        seq += 1
        conn.deliver(*_frame(ReasonDelta(1, "x"), seq))
    seq += 1
    conn.deliver(*_frame(ToolStarted(1, "c1", "web_search", {}), seq))
    conn.overtake_deltas()
    for event in [
        ChatDelta("x"),
        AnswerDelta(1, "x"),
        ThinkingDelta(1, "reason", "x"),
        RunStopped(1, "user", {}),
        RunEnded(),
        ChatDelta("x"),  # the next run's deltas are sent again
    ]:
        seq += 1
        conn.deliver(*_frame(event, seq))
    kinds = await _drain(conn, socket)
    assert kinds == ["tool_start", "agent_stopped", "response_complete", "chat_delta"]
    assert conn.skipped == OVERTAKE_AFTER + 53


async def test_a_stop_with_few_frames_waiting_sends_every_delta():
    socket = _Socket()
    conn = Connection(cast(WebSocket, socket), 10_000)
    for seq in range(1, OVERTAKE_AFTER + 1):
        conn.deliver(*_frame(ChatDelta("x"), seq))
    conn.overtake_deltas()
    conn.deliver(*_frame(ChatDelta("x"), OVERTAKE_AFTER + 1))
    kinds = await _drain(conn, socket)
    assert kinds == ["chat_delta"] * (OVERTAKE_AFTER + 1) and conn.skipped == 0


async def test_frames_the_replay_sent_are_left_out_even_when_they_arrive_after_it():
    socket = _Socket()
    conn = Connection(cast(WebSocket, socket), 10_000)
    conn.hold()
    conn.deliver(*_frame(ChatDelta("x"), 4))  # held, and in the replay
    conn.release(5)
    conn.deliver(*_frame(ChatDelta("x"), 5))  # committed before, delivered after the replay
    conn.deliver(*_frame(ChatDone("x"), 6))
    assert await _drain(conn, socket) == ["chat_response"]


class _LiveSession:
    """As much of a LiveSession as attaching uses."""

    def __init__(self, last_seq: int) -> None:
        self.session_id = "s"
        self.last_seq = last_seq
        self.subscribers: set[Any] = set()

    def subscribe(self, subscriber: Any) -> None:
        self.subscribers.add(subscriber)

    def snapshot(self) -> dict[str, Any]:
        return {"status": "running", "last_seq": self.last_seq}


async def _no_versions(live: Any) -> list[str]:
    return []


def _services(active_path: Any) -> Any:
    """As much of Services as attaching reads: the hub's defaults and active path, and of
    its stored sessions that the store is well and not shared."""
    stored = SimpleNamespace(outage=lambda: None, shared=False)
    hub = SimpleNamespace(session_defaults={}, active_path=active_path, stored=stored)
    return SimpleNamespace(hub=hub)


async def test_a_store_that_does_not_answer_leaves_the_active_path_unknown(monkeypatch):
    """Versions of a turn: the `session` frame never waits through a store outage for the
    active path; it says `null` (unknown) and goes out."""
    monkeypatch.setattr(ws, "ACTIVE_PATH_WAIT_S", 0.05)
    never = asyncio.Event()

    async def hangs(live: Any) -> list[str]:
        await never.wait()
        return []

    async def fails(live: Any) -> list[str]:
        raise StorageError("the store is away")

    for active_path in (hangs, fails, _no_versions):
        socket = _Socket()
        conn = Connection(cast(WebSocket, socket), 10_000)
        live = _LiveSession(last_seq=3)
        await ws._attach(
            _services(active_path),
            cast(WebSocket, socket),
            cast(Any, live),
            conn,
            resumed=True,
            after_seq=None,
            query_error=None,
        )
        expected = [] if active_path is _no_versions else None
        assert orjson.loads(socket.sent[0])["active_path"] == expected


async def test_a_frame_delivered_while_the_session_frame_is_sent_is_not_lost():
    """Attaching without `after_seq`: the client's first live frame follows the `last_seq`
    of its session frame, even when the run delivers one while that frame goes out."""
    live = _LiveSession(last_seq=7)
    socket = _Socket()
    conn = Connection(cast(WebSocket, socket), 10_000)

    class _SocketWithARunningSession(_Socket):
        async def send_text(self, text: str) -> None:
            socket.sent.append(text)
            if len(socket.sent) == 1:  # the run delivers seq 8 meanwhile
                live.last_seq = 8
                for sub in live.subscribers:
                    sub.deliver(*_frame(ChatDelta("x"), 8))

    services = _services(_no_versions)
    await _attach(
        cast(Any, services),
        cast(WebSocket, _SocketWithARunningSession()),
        cast(Any, live),
        conn,
        resumed=True,
        after_seq=None,
        query_error=None,
    )
    kinds = await _drain(conn, socket)
    assert kinds == ["session", "chat_delta"]
    assert orjson.loads(socket.sent[0])["last_seq"] == 7
    assert orjson.loads(socket.sent[1])["seq"] == 8


async def test_a_long_queue_lets_other_tasks_run_every_few_frames():
    """A send does not yield while the socket takes the bytes: the writer yields by itself,
    every `FRAMES_PER_TURN` frames, so this socket's reader (a stop) is never kept waiting
    behind a long queue, and a short one goes out in one turn of the event loop."""
    socket = _Socket()
    conn = Connection(cast(WebSocket, socket), 10_000)
    for seq in range(1, 4 * FRAMES_PER_TURN + 1):
        conn.deliver(*_frame(ReasonDelta(1, "x"), seq))
    seen: list[int] = []

    async def other() -> None:
        while len(seen) < 4:
            seen.append(len(socket.sent))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(other())
    await _drain(conn, socket)
    await watcher
    assert seen == [FRAMES_PER_TURN * n for n in range(1, 5)]


async def test_the_queue_is_bounded_in_bytes_too_and_counts_what_was_sent():
    """A client that stops reading is closed once its frames pass a byte bound, not only a
    count: 2048 frames of a megabyte each would be 2 GB held for one socket."""
    socket = _Socket()
    two_sent = asyncio.Event()
    send = socket.send_text

    async def send_text(text: str) -> None:
        await send(text)
        if len(socket.sent) == 2:
            two_sent.set()

    socket.send_text = send_text  # type: ignore[method-assign]
    conn = Connection(cast(WebSocket, socket), 10_000, max_bytes=10_000)
    big = "x" * 4_000
    writer = asyncio.create_task(conn.write_forever())
    conn.send(big)
    conn.send(big)
    async with asyncio.timeout(5):
        await two_sent.wait()
    conn.send(big)  # the two sent no longer count
    conn.send(big)
    assert not conn.overflowed.is_set()
    conn.send(big)  # 12,000 waiting
    assert conn.overflowed.is_set()
    conn.finish(1000)
    await writer
