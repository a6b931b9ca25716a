"""Typed events to the edge: every kind of event a run or the server makes goes through
`LiveSession` as a typed `Event`, is serialized once (by the store), and `/ws` sends exactly
the bytes the frames had before events stayed typed; read back from the store, each decodes
into the very event that was delivered live."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast, get_args

import orjson
import pytest
from starlette.websockets import WebSocket

from agent.control import RunControl
from agent.events import (
    AgentEvent,
    AnswerDelta,
    ApprovalRequested,
    ApprovalTimedOut,
    ChatDelta,
    ChatDone,
    ContextTrimmed,
    FinishVerified,
    InputRequested,
    InputTimedOut,
    ModelRetrying,
    ObserveDelta,
    ObserveDone,
    PlanMade,
    ReasonDelta,
    ReasonDone,
    ResearchDone,
    RunCompleted,
    RunStarted,
    RunStopped,
    StepStarted,
    ThinkingDelta,
    ToolCompleted,
    ToolFailed,
    ToolStarted,
    UserAnswered,
    UserMessage,
)
from server import run_sink
from server.connection import Connection
from server.events import Event, PathShown, RunEnded, RunFailed, TitleChanged
from server.live import ActiveRun, LiveSession
from server.run_sink import RunSink
from server.storage.base import Scope, SessionStatus
from server.storage.frames import read_decoded
from server.storage.sqlite import SQLiteStore

ALICE = Scope("acme", "alice")
TS = 1700000000123

# Each event, and the frame `/ws` sent for it before events stayed typed (made by the frame
# code of the commit before, `seq` 0 standing for the one the store gives).
RUN_EVENTS: list[tuple[AgentEvent, str]] = [
    (
        RunStarted(max_steps=8),
        '{"type":"agent_update","update_type":"agent_start","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"max_steps":8}',
    ),
    (
        StepStarted(step=2),
        '{"type":"agent_update","update_type":"agent_turn_start","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":2}',
    ),
    (
        ReasonDelta(step=2, delta="Think"),
        '{"type":"agent_update","update_type":"agent_reason_delta","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":2,"delta":"Think"}',
    ),
    (
        ReasonDone(step=2, content="Thinking done"),
        '{"type":"agent_update","update_type":"agent_reason","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"step":2,"content":"Thinking done"}',
    ),
    (
        ToolStarted(step=2, call_id="c1", name="web_search", arguments={"query": "paris", "n": 3}),
        '{"type":"tool_start","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"step":2,"tool_call_id":"c1","tool_name":"web_search",'
        '"arguments":{"query":"paris","n":3}}',
    ),
    (
        ToolCompleted(
            step=2, call_id="c1", name="web_search", result={"hits": [1, 2]}, duration_ms=41
        ),
        '{"type":"tool_complete","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"step":2,"tool_call_id":"c1","tool_name":"web_search","result":{"hits":[1,2]},'
        '"duration_ms":41}',
    ),
    (
        ToolFailed(step=2, call_id="c2", name="fetch", error="timed out"),
        '{"type":"tool_error","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"step":2,"tool_call_id":"c2","tool_name":"fetch","error":"timed out"}',
    ),
    (
        InputRequested(3, "Which city?", "c3", 1700000000000, tool_name="ask_user"),
        '{"type":"agent_update","update_type":"agent_request_input","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":3,"question":"Which city?",'
        '"tool_call_id":"c3","tool_name":"ask_user","expires_at":1700000000000}',
    ),
    (
        InputTimedOut(step=3),
        '{"type":"agent_update","update_type":"agent_request_input_timeout","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":3}',
    ),
    (
        ApprovalRequested(4, "c4", "delete_file", {"path": "/tmp/x"}, 1700000001000),
        '{"type":"agent_update","update_type":"agent_tool_approval","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":4,"tool_call_id":"c4",'
        '"tool_name":"delete_file","arguments":{"path":"/tmp/x"},"expires_at":1700000001000}',
    ),
    (
        ApprovalTimedOut(step=4, call_id="c4"),
        '{"type":"agent_update","update_type":"agent_tool_approval_timeout","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":4,"tool_call_id":"c4"}',
    ),
    (
        ObserveDelta(step=4, delta="Saw"),
        '{"type":"agent_update","update_type":"agent_observe_delta","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":4,"delta":"Saw"}',
    ),
    (
        ObserveDone(step=4, content="Saw it"),
        '{"type":"agent_update","update_type":"agent_observe","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"step":4,"content":"Saw it"}',
    ),
    (
        RunStopped(step=5, reason="user", usage={"input_tokens": 10, "output_tokens": 2}),
        '{"type":"agent_update","update_type":"agent_stopped","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"step":5,"reason":"user",'
        '"usage":{"input_tokens":10,"output_tokens":2}}',
    ),
    (
        RunStopped(step=5, reason="run_timeout", usage={"input_tokens": 11, "cost": 0.5}),
        '{"type":"error","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"code":"internal_error","message":"The run took longer than its time limit and was '
        'ended.","usage":{"input_tokens":11,"cost":0.5}}',
    ),
    (
        PlanMade(step=1, plan=("look", "answer")),
        '{"type":"agent_update","update_type":"agent_plan","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"step":1,"plan":["look","answer"]}',
    ),
    (
        FinishVerified(step=5, done=False, reason="missing the date"),
        '{"type":"agent_update","update_type":"agent_verify","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"step":5,"done":false,"reason":"missing the date"}',
    ),
    (
        ContextTrimmed(6, "reason", 900, 800, True, ({"role": "tool", "chars": 10},), 2, 1, 3),
        '{"type":"agent_update","update_type":"agent_context","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"step":6,"phase":"reason","tokens":900,"budget":800,'
        '"exact":true,"compressed":[{"role":"tool","chars":10}],"dropped_messages":2,'
        '"collapsed_steps":1,"dropped_steps":3}',
    ),
    (
        ResearchDone(query="q", summary="s", sources=("https://a", "https://b")),
        '{"type":"agent_update","update_type":"agent_research","session_id":"s1","run_id":"r1",'
        '"seq":0,"ts":1700000000123,"query":"q","summary":"s",'
        '"sources":["https://a","https://b"]}',
    ),
    (
        RunCompleted(6, "Paris", "finished", {"input_tokens": 20}),
        '{"type":"agent_update","update_type":"agent_completion","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"steps":6,"final_answer":"Paris",'
        '"stop_reason":"finished","usage":{"input_tokens":20}}',
    ),
    (
        ChatDelta(delta="Hel"),
        '{"type":"chat_delta","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"delta":"Hel"}',
    ),
    (
        ChatDone(content="Hello", usage={"input_tokens": 3}),
        '{"type":"chat_response","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"content":"Hello","usage":{"input_tokens":3}}',
    ),
    (
        UserMessage(content="Hi", agent_mode=True),
        '{"type":"agent_update","update_type":"agent_user_message","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"content":"Hi","agent_mode":true,'
        '"origin":"chat"}',
    ),
    (
        UserMessage("Again", False, "retry", "m1", "r0", "r9", versioned=True),
        '{"type":"agent_update","update_type":"agent_user_message","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"content":"Again","agent_mode":false,'
        '"origin":"retry","id":"m1","parent_run_id":"r0","replaces":"r9"}',
    ),
    (
        UserMessage(content="First", agent_mode=True, versioned=True),
        '{"type":"agent_update","update_type":"agent_user_message","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"content":"First","agent_mode":true,'
        '"origin":"chat","parent_run_id":null}',
    ),
    (
        UserAnswered(step=3, call_id="c3", content="Paris"),
        '{"type":"agent_update","update_type":"agent_user_answer","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":3,"tool_call_id":"c3",'
        '"content":"Paris"}',
    ),
    (
        AnswerDelta(step=6, delta="Par"),
        '{"type":"agent_update","update_type":"agent_answer_delta","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":6,"delta":"Par"}',
    ),
    (
        ThinkingDelta(step=6, phase="reason", delta="hmm"),
        '{"type":"agent_update","update_type":"agent_reasoning_delta","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":6,"phase":"reason","delta":"hmm"}',
    ),
    (
        ModelRetrying(6, "reason", 2, 4, "503", 250),
        '{"type":"agent_update","update_type":"agent_llm_retry","session_id":"s1",'
        '"run_id":"r1","seq":0,"ts":1700000000123,"step":6,"phase":"reason","attempt":2,'
        '"max_attempts":4,"reason":"503","delay_ms":250}',
    ),
]
SERVER_EVENTS: list[tuple[Event, str]] = [
    (
        Event(RunFailed("llm_error", "The model failed.", {"input_tokens": 4}), "s1", "r1", TS),
        '{"type":"error","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"code":"llm_error","message":"The model failed.","usage":{"input_tokens":4}}',
    ),
    (
        Event(RunFailed("storage_error", "The store failed."), "s1", "r1", TS),
        '{"type":"error","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123,'
        '"code":"storage_error","message":"The store failed."}',
    ),
    (
        Event(PathShown("r1", ("r0", "r1"), "v1"), "s1", None, TS),
        '{"type":"active_path","session_id":"s1","seq":0,"ts":1700000000123,"selected":"r1",'
        '"active_path":["r0","r1"],"id":"v1"}',
    ),
    (
        Event(RunEnded(), "s1", "r1", TS),
        '{"type":"response_complete","session_id":"s1","run_id":"r1","seq":0,"ts":1700000000123}',
    ),
]
TITLE = '{"type":"session_title","session_id":"s1","title":"Trip"}'


class _Socket:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_text(self, text: str) -> None:
        self.sent.append(text)

    async def close(self, code: int) -> None:
        return None


class _Typed:
    """A subscriber that keeps the typed events it was given."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def deliver(self, text: str, seq: int | None, event: Event) -> None:
        self.events.append(event)

    def finish(self, code: int) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


def test_every_kind_of_agent_event_is_covered() -> None:
    assert {type(event) for event, _ in RUN_EVENTS} == set(get_args(AgentEvent))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "wire.db")
    await opened.open()
    yield opened
    await opened.close()


async def _sent_through_a_session(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], list[Event]]:
    """Every event of `RUN_EVENTS` and `SERVER_EVENTS` sent through one session, as a run
    and the server send them: the texts a `/ws` connection sent, the events delivered."""
    monkeypatch.setattr(run_sink, "now_ms", lambda: TS)
    record = await store.create_session(ALICE, "s1", 100)
    live = LiveSession(record, store)
    socket, typed = _Socket(), _Typed()
    connection = Connection(cast(WebSocket, socket), 10_000)
    live.subscribe(connection)
    live.subscribe(typed)
    live.claim_run(ActiveRun("r1", RunControl()))
    await live.publish([], status=SessionStatus.RUNNING, run_id="r1")
    sink = RunSink(live, "r1")
    for event, _ in RUN_EVENTS:
        await sink.emit(event)
    for event, _ in SERVER_EVENTS[:-1]:
        await live.publish([event])
    await live.publish([SERVER_EVENTS[-1][0]], status=SessionStatus.IDLE)
    live.notify(Event(TitleChanged("Trip"), "s1"))
    connection.finish(1000)
    await connection.write_forever()
    return socket.sent, typed.events


async def test_ws_sends_each_event_as_its_frame_was_before(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent, _ = await _sent_through_a_session(store, monkeypatch)
    before = [text for _, text in RUN_EVENTS + SERVER_EVENTS]
    numbered = [text.replace('"seq":0,', f'"seq":{n},', 1) for n, text in enumerate(before, 1)]
    assert sent == [*numbered, TITLE]


async def test_every_stored_event_reads_back_as_the_event_delivered_live(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, delivered = await _sent_through_a_session(store, monkeypatch)
    stored = await read_decoded(store, ALICE, "s1", 0)
    assert stored == delivered[:-1]  # the title is not stored
    assert [e.seq for e in stored] == list(range(1, len(RUN_EVENTS) + len(SERVER_EVENTS) + 1))
    # What a run published typed is what was delivered and read back (a run the time limit
    # ended is reported as the `error` its frame is).
    published = [event for event, _ in RUN_EVENTS]
    for event, read in zip(published, stored, strict=False):
        if isinstance(event, RunStopped) and event.reason == "run_timeout":
            assert isinstance(read.event, RunFailed) and read.event.usage == event.usage
        else:
            assert read.event == event
    # Each one's frame made again (AG-UI's rawEvent) is the stored text, byte for byte.
    raw = await store.read_events(ALICE, "s1", 0)
    assert [orjson.dumps(e.frame()) for e in stored] == raw
