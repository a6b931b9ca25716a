"""server/storage/frames.py: stored events read back as typed frames, decoded in one place."""

from __future__ import annotations

from server.protocol import run_frame
from server.storage.base import Scope
from server.storage.frames import Frame, decode, frames_in_pages, read_frames
from server.storage.sqlite import SQLiteStore

ALICE = Scope("acme", "alice")


def test_a_frame_says_what_happened_whatever_its_envelope() -> None:
    update = Frame(run_frame("agent_update", "s", "r", 1, "agent_request_input"))
    assert (update.kind, update.run_id, update.seq) == ("agent_request_input", "r", 0)
    title = Frame({"type": "session_title", "session_id": "s", "title": "Trip"})
    assert (title.kind, title.run_id, title.seq, title.step) == ("session_title", None, None, 0)
    assert title.pick(("title", "step")) == {"title": "Trip", "step": None}
    assert decode(b"[1, 2]") == Frame({})  # never stored by this server: it says nothing


async def test_stored_frames_read_back_as_they_were_stored(sqlite_store: SQLiteStore) -> None:
    await sqlite_store.create_session(ALICE, "s1", 100)
    frames = [run_frame("agent_update", "s1", "r1", 2, "agent_start")]
    frames.append({**run_frame("chat_response", "s1", "r1", 3), "usage": {"input_tokens": 5}})
    frames.append(run_frame("response_complete", "s1", "r1", 4))
    await sqlite_store.append_events(ALICE, "s1", frames, 5)
    read = await read_frames(sqlite_store, ALICE, "s1", 0)
    assert [(f.seq, f.kind) for f in read] == [
        (1, "agent_start"),
        (2, "chat_response"),
        (3, "response_complete"),
    ]
    assert [f.body for f in read] == frames  # each numbered by the store as it was stored
    pages = [page async for page in frames_in_pages(sqlite_store, ALICE, "s1", 0, marker=b"usage")]
    assert [[f.get("usage") for f in page] for page in pages] == [[{"input_tokens": 5}]]
