"""StoredSessions: what the endpoints read and change of the stored sessions.

The HTTP API, `/ws` and `/agui` reach the store only through here (`SessionHub.stored`), by
named reads scoped by the caller; a test keeps them so (tests/server/test_boundaries.py). The
store's own protocol stays the session layer's to use: a transport does not learn which part
of the store answers, nor how a backend pages or searches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from server.events import Event
from server.storage.base import (
    EVENTS_PAGE,
    EVENTS_PAGE_BYTES,
    Scope,
    SessionRecord,
    Store,
    events_in_pages,
)
from server.storage.frames import decoded_in_pages
from server.storage.outage import Outage, outage_of
from server.storage.search import SearchHit, SessionSearch
from server.versions import Tree, load_tree, messages_on_path

__all__ = ["StoredSessions"]


class StoredSessions:
    """The caller's stored sessions, their messages and events, as the endpoints see them."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def shared(self) -> bool:
        """True when other processes write the same sessions (`Store.shared`)."""
        return self._store.shared

    def outage(self) -> Outage | None:
        """How the store is (for /healthz, and to skip a read while it is down)."""
        return outage_of(self._store)

    async def get(self, scope: Scope, session_id: str) -> SessionRecord | None:
        return await self._store.get_session(scope, session_id)

    async def newest(self, scope: Scope, limit: int) -> list[SessionRecord]:
        """The caller's last `limit` sessions, newest update first."""
        return await self._store.list_sessions(scope, limit)

    async def search(self, scope: Scope, query: str, limit: int) -> list[SearchHit] | None:
        """The caller's sessions matching `query`, newest update first; None when the store
        cannot search messages."""
        if not isinstance(self._store, SessionSearch):
            return None
        return await self._store.search_sessions(scope, query, limit)

    async def rename(self, scope: Scope, session_id: str, title: str) -> SessionRecord | None:
        """Set the session's title; its record after, or None when there is no such session
        (also one deleted meanwhile)."""
        if not await self._store.rename_session(scope, session_id, title):
            return None
        return await self._store.get_session(scope, session_id)

    async def messages(
        self, scope: Scope, session_id: str, limit: int, since: int | None, max_bytes: int
    ) -> tuple[list[dict[str, Any]], int, list[str]]:
        """A page of the messages on the shown path, their total, and the path
        (server/versions.py `messages_on_path`)."""
        return await messages_on_path(self._store, scope, session_id, limit, since, max_bytes)

    async def last_messages(
        self, scope: Scope, session_id: str, limit: int
    ) -> list[dict[str, Any]]:
        """The session's last `limit` messages (API dicts), oldest first, every version."""
        messages, _ = await self._store.read_messages(scope, session_id, limit, None)
        return messages

    async def tree(self, scope: Scope, session_id: str) -> Tree:
        """The session's run tree (server/versions.py)."""
        return await load_tree(self._store, scope, session_id)

    def events(
        self,
        scope: Scope,
        session_id: str,
        after_seq: int,
        *,
        events: int = EVENTS_PAGE,
        max_bytes: int = EVENTS_PAGE_BYTES,
    ) -> AsyncIterator[tuple[list[bytes], int]]:
        """The stored events after `after_seq`, a page at a time with the `seq` of its last
        (`events_in_pages`)."""
        return events_in_pages(
            self._store, scope, session_id, after_seq, events=events, max_bytes=max_bytes
        )

    def decoded(
        self, scope: Scope, session_id: str, after_seq: int, *, marker: bytes = b""
    ) -> AsyncIterator[list[Event]]:
        """The stored events after `after_seq`, decoded a page at a time; with `marker`, only
        those whose stored text contains it (`decoded_in_pages`)."""
        return decoded_in_pages(self._store, scope, session_id, after_seq, marker=marker)

    async def stored_bytes(self, tenant: str | None = None) -> dict[str, int]:
        """Bytes kept per tenant (`SessionStore.stored_bytes`)."""
        return await self._store.stored_bytes(tenant)
