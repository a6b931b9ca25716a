"""server/storage/frames.py: stored events read back as the typed events a run published,
decoded in one place; what this server did not write reads as an event that says nothing."""

from __future__ import annotations

import orjson
import pytest

from agent.events import InputRequested, StepStarted
from server.events import Event, RunEnded, RunFailed, Unrecognized
from server.protocol import run_frame
from server.storage.base import Scope
from server.storage.frames import decode, decoded_in_pages, read_decoded
from server.storage.sqlite import SQLiteStore

ALICE = Scope("acme", "alice")


def test_a_stored_frame_decodes_into_its_event_and_envelope() -> None:
    frame = {**run_frame("agent_update", "s", "r", 5, "agent_request_input"), "seq": 3}
    frame.update(step=1, question="Which city?", tool_call_id="c1", expires_at=9)
    event = decode(orjson.dumps(frame))
    assert event == Event(InputRequested(1, "Which city?", "c1", 9), "s", "r", 5, 3)
    assert event.wire_kind == "agent_request_input"


ENVELOPE = b'"session_id": "s", "run_id": "r", "seq": 4, "ts": 2'


@pytest.mark.parametrize(
    "raw",
    [
        b"[1, 2]",  # not an object
        b"not json",
        b'{"type": ["agent_update"], "run_id": 7}',
        b'{"type": "agent_update", "update_type": {"a": 1}, ' + ENVELOPE + b"}",
        b'{"type": "agent_update", "update_type": "agent_turn_start", "step": "two", '
        + ENVELOPE
        + b"}",
        b'{"type": "agent_update", "update_type": "agent_turn_start", "step": true, '
        + ENVELOPE
        + b"}",
        b'{"type": "agent_update", "update_type": "agent_turn_start", ' + ENVELOPE + b"}",
        b'{"type": "tool_start", "tool_call_id": "c", "tool_name": "t", "arguments": [], '
        b'"step": 1, ' + ENVELOPE + b"}",
        b'{"type": "error", "code": "llm_error", ' + ENVELOPE + b"}",  # no message
        b'{"type": "from_a_newer_server", ' + ENVELOPE + b"}",
        # a known kind in a damaged envelope
        b'{"type": "response_complete", "session_id": "s", "run_id": "r", "seq": "4"}',
        b'{"type": "response_complete", "run_id": "r", "seq": 4, "ts": 2}',
        b'{"type": "agent_update", "update_type": "agent_turn_start", "step": 1, '
        b'"session_id": "s", "run_id": ["r"], "seq": 4, "ts": 2}',
    ],
)
def test_what_this_server_did_not_write_decodes_to_an_event_that_says_nothing(
    raw: bytes,
) -> None:
    event = decode(raw)
    assert isinstance(event.event, Unrecognized)
    body = event.event.body
    assert event.frame() == body  # passed on as it was
    assert event.run_id == (body.get("run_id") if isinstance(body.get("run_id"), str) else None)


def test_the_envelope_of_an_unknown_frame_is_kept() -> None:
    event = decode(b'{"type": "from_a_newer_server", "run_id": "r", "seq": 4, "ts": 2}')
    assert (event.run_id, event.seq, event.ts, event.wire_kind) == (
        "r",
        4,
        2,
        "from_a_newer_server",
    )


async def test_stored_frames_read_back_as_they_were_stored(sqlite_store: SQLiteStore) -> None:
    await sqlite_store.create_session(ALICE, "s1", 100)
    frames = [{**run_frame("agent_update", "s1", "r1", 2, "agent_turn_start"), "step": 1}]
    frames.append({**run_frame("error", "s1", "r1", 3), "code": "llm_error", "message": "m"})
    frames[-1]["usage"] = {"input_tokens": 5}
    frames.append(run_frame("response_complete", "s1", "r1", 4))
    await sqlite_store.append_events(ALICE, "s1", frames, 5)
    read = await read_decoded(sqlite_store, ALICE, "s1", 0)
    assert [e.event for e in read] == [
        StepStarted(1),
        RunFailed("llm_error", "m", {"input_tokens": 5}),
        RunEnded(),
    ]
    assert [(e.seq, e.ts) for e in read] == [(1, 2), (2, 3), (3, 4)]
    assert [e.frame() for e in read] == frames  # each numbered by the store as it was stored
    pages = [page async for page in decoded_in_pages(sqlite_store, ALICE, "s1", 0, marker=b"usage")]
    assert [[e.event for e in page] for page in pages] == [[read[1].event]]
