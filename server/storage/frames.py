"""Event frames as the server acts on them: the frame dict as built, with typed access to the
few fields that say what happened, so no module parses JSON it built itself.

A frame a run builds reaches the subscribers as built (`LiveSession`), beside its text. A
frame read back from the store (another process's run, a run to recover or rerun, a
thread to reconnect) is decoded here, once: this module is the only decoder of stored
events (tests/server/test_boundaries.py). The replay sends stored text as it is, unparsed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from server.storage.base import Scope, Store, events_in_pages

__all__ = ["Frame", "decode", "frames_in_pages", "read_frames"]


@dataclass(frozen=True, slots=True)
class Frame:
    """One event frame; `body` is never changed (subscribers share it)."""

    body: dict[str, Any]

    @property
    def kind(self) -> str:
        """What happened: the `update_type` of an `agent_update`, else the frame's `type`."""
        return str(self.body.get("update_type") or self.body.get("type") or "")

    @property
    def run_id(self) -> str | None:
        run_id = self.body.get("run_id")
        return None if run_id is None else str(run_id)

    @property
    def seq(self) -> int | None:
        """Its place in the session's events; None for a frame that was not stored."""
        seq = self.body.get("seq")
        return seq if isinstance(seq, int) else None

    @property
    def step(self) -> int:
        return int(self.body.get("step") or 0)

    @property
    def tool_call_id(self) -> str | None:
        call_id = self.body.get("tool_call_id")
        return None if call_id is None else str(call_id)

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)

    def pick(self, keys: Iterable[str]) -> dict[str, Any]:
        """These fields of the frame (None where it has none), as a new dict."""
        return {key: self.body.get(key) for key in keys}


def decode(raw: bytes | str) -> Frame:
    """A stored event's frame. Stored events are JSON objects; anything else (never written
    by this server) reads as a frame that says nothing."""
    body = orjson.loads(raw)
    return Frame(body if isinstance(body, dict) else {})


async def read_frames(
    store: Store, scope: Scope, session_id: str, after_seq: int, limit: int | None = None
) -> list[Frame]:
    """The session's stored events with seq > `after_seq` (at most `limit`), decoded."""
    return [decode(raw) for raw in await store.read_events(scope, session_id, after_seq, limit)]


async def frames_in_pages(
    store: Store, scope: Scope, session_id: str, after_seq: int, *, marker: bytes = b""
) -> AsyncIterator[list[Frame]]:
    """The session's stored events after `after_seq`, decoded a page at a time (a long
    session is never held whole in memory: see `events_in_pages`). With `marker`, only the
    events whose stored text contains it: a cheap filter before decoding."""
    async for page, _ in events_in_pages(store, scope, session_id, after_seq):
        yield [decode(raw) for raw in page if marker in raw]
