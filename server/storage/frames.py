"""Stored events read back: each decoded here, once, into the `Event` a run published.

A run's events reach the subscribers as typed `Event`s, beside the text the store made of
them. An event read back from the store (another process's run, a run to recover or rerun,
a thread to reconnect) is decoded here into the same type (server/events.py `event_of`, the
reverse of the frame it was stored as), so nothing else parses JSON the server built: this
module is the only decoder of stored events (tests/server/test_boundaries.py). The replay
sends stored text as it is, unparsed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from server.events import Event, Unrecognized, event_of
from server.storage.base import Scope, Store, events_in_pages

__all__ = ["decode", "decoded_in_pages", "read_decoded"]


def decode(raw: bytes | str) -> Event:
    """A stored event. Stored events are JSON objects; anything else (never written by this
    server) reads as an event that says nothing, never an error."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        return Event(Unrecognized({}), "")
    return event_of(body)


async def read_decoded(
    store: Store, scope: Scope, session_id: str, after_seq: int, limit: int | None = None
) -> list[Event]:
    """The session's stored events with seq > `after_seq` (at most `limit`), decoded."""
    return [decode(raw) for raw in await store.read_events(scope, session_id, after_seq, limit)]


async def decoded_in_pages(
    store: Store, scope: Scope, session_id: str, after_seq: int, *, marker: bytes = b""
) -> AsyncIterator[list[Event]]:
    """The session's stored events after `after_seq`, decoded a page at a time (a long
    session is never held whole in memory: see `events_in_pages`). With `marker`, only the
    events whose stored text contains it: a cheap filter before decoding."""
    async for page, _ in events_in_pages(store, scope, session_id, after_seq):
        yield [decode(raw) for raw in page if marker in raw]
