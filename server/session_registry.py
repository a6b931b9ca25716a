"""SessionRegistry: the sessions held in memory, one LiveSession per session id.

A session is held while a connection watches it or a run works on it, and forgotten as soon
as neither does, so memory follows activity, not history. Every connection and run of a
session shares its one LiveSession, hence one write order.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Mapping

from agent.errors import StorageError
from server import remote
from server.live import LiveSession, WriteBacklog, now_ms
from server.protocol import ProtocolError
from server.relay import SESSION_GONE
from server.run_recovery import Repairs
from server.settings import RUN_LEASE_S
from server.storage.base import DeleteOutcome, Scope, SessionRecord, SessionStatus, Store

# WebSocket "service restart": what is held here of the session was wrong; reconnect (with
# `after_seq`) and read it from the store.
RECONNECT = 1012

__all__ = ["RECONNECT", "SessionRegistry"]


class SessionRegistry:
    """Open, hold and release sessions; close their watchers."""

    def __init__(
        self,
        store: Store,
        repairs: Repairs,
        *,
        sessions: dict[str, LiveSession] | None = None,
        lease_ms: int = int(RUN_LEASE_S * 1000),
    ) -> None:
        self._store = store
        self._repairs = repairs
        self._lease_ms = lease_ms
        self._live: dict[str, LiveSession] = {} if sessions is None else sessions
        self._emptied = asyncio.Event()
        self._deleting: Counter[str] = Counter()  # deletes in progress, by session id
        self._backlog = WriteBacklog()  # one for the process's sessions: is the store behind?

    @property
    def sessions(self) -> Mapping[str, LiveSession]:
        """The sessions held now, by id (read only: open and release change it)."""
        return self._live

    async def open(
        self, scope: Scope, session_id: str | None, *, create: bool = False
    ) -> tuple[LiveSession, bool]:
        """Return (live session, resumed). A new session is made when `session_id` is None,
        or (`create`, for AG-UI's client-chosen thread ids) when no session of the caller has
        that id; the caller must then `ensure_stored` it, which fails on another's id.

        A new session is stored with its first `chat`; until then it lives only while a
        connection holds it, so page loads that never chat leave nothing behind.
        Raise ProtocolError("session_not_found") for an unknown or foreign id.
        """
        if session_id is not None and (held := self._live.get(session_id)) is not None:
            await self._forget_if_deleted_elsewhere(held)  # then opened like any unknown id
        if session_id is None or (create and await self._unknown(scope, session_id)):
            now = now_ms()
            record = SessionRecord(
                session_id or uuid.uuid4().hex,
                scope.tenant_id,
                scope.user_id,
                SessionStatus.IDLE,
                "",
                now,
                now,
                0,
            )
            live = self._live[record.session_id] = self._new_live(record, stored=False)
            self._emptied.clear()
            return live, False
        repair = self._repairs.pending(session_id)
        if repair is not None and repair.scope == scope and session_id not in self._live:
            await self._repairs.repair(repair)  # the store may be back: settle the run first
        live_or_none = self._live.get(session_id)
        if live_or_none is None:
            stored = await self._store.get_session(scope, session_id)
            live_or_none = self._live.get(session_id)  # another connection may have won
            if live_or_none is None and stored is not None:
                live_or_none = self._live[session_id] = self._new_live(stored)
                self._emptied.clear()
                elsewhere = stored.status != SessionStatus.IDLE and self._store.shared
                if elsewhere:  # another process's run
                    await remote.settle_from_last_event(self._store, live_or_none)
                    if live_or_none.status == SessionStatus.AWAITING_APPROVAL and (
                        live_or_none.pending_approval is None
                    ):
                        await remote.find_pending_approval(self._store, live_or_none)
        if live_or_none is None or live_or_none.scope != scope:
            raise ProtocolError("session_not_found", "There is no such session.")
        return live_or_none, True

    async def _forget_if_deleted_elsewhere(self, live: LiveSession) -> None:
        """On a shared store another process may have deleted a session held here for its
        watchers before the relay noticed (it checks about once a second): then forget it,
        closing them, rather than hand it to one more connection. A store that cannot say
        leaves it held."""
        if not self._store.shared or not live.stored or live.run is not None:
            return
        try:
            owners = await self._store.session_owners([live.session_id])
        except StorageError:
            return
        if owners.get(live.session_id) != live.scope and self._live.get(live.session_id) is live:
            self.forget(live.session_id, SESSION_GONE)

    async def _unknown(self, scope: Scope, session_id: str) -> bool:
        """No session of that id, neither in memory nor in the store. Another's id is refused
        here, before anything is held under it: held, it would answer the owner's own
        connections `session_not_found` until the caller's insert failed."""
        if session_id in self._live:
            return False
        owner = (await self._store.session_owners([session_id])).get(session_id)
        if owner is not None and owner != scope:
            raise ProtocolError("session_not_found", "There is no such session.")
        return owner is None and session_id not in self._live  # nobody made it meanwhile

    def _new_live(self, record: SessionRecord, *, stored: bool = True) -> LiveSession:
        return LiveSession(
            record, self._store, stored=stored, lease_ms=self._lease_ms, backlog=self._backlog
        )

    def release(self, live: LiveSession) -> None:
        """Forget the session when nobody watches it and no run works on it."""
        if live.idle and self._live.get(live.session_id) is live:
            del self._live[live.session_id]
            if not self._live:
                self._emptied.set()

    def run_active(self, session_id: str) -> bool:
        """True while a run of this session is working in this process."""
        live = self._live.get(session_id)
        return live is not None and live.run is not None

    async def delete(self, scope: Scope, session_id: str) -> DeleteOutcome:
        """Delete an idle session from the store. Until the store answers, no run of it
        starts here (`deleting`); the store itself refuses when a run holds it elsewhere."""
        if self.run_active(session_id):
            return "run_in_progress"
        self._deleting[session_id] += 1
        try:
            return await self._store.delete_session(scope, session_id, now_ms())
        finally:
            self._deleting[session_id] -= 1
            if not self._deleting[session_id]:
                del self._deleting[session_id]

    def deleting(self, session_id: str) -> bool:
        """True while a delete of this session is in progress in this process."""
        return session_id in self._deleting

    def live_count(self, tenant: str | None = None) -> int:
        """Sessions held in memory (watched or running), of one tenant or (None) of all."""
        if tenant is None:
            return len(self._live)
        return sum(1 for live in self._live.values() if live.scope.tenant_id == tenant)

    async def wait_empty(self) -> None:
        """Return once no session is held in memory (leak checks, tests)."""
        while self._live:
            self._emptied.clear()
            await self._emptied.wait()

    def forget(self, session_id: str, code: int) -> None:
        """What is held here of the session is no longer true (it was deleted in the store,
        or another process took its run over): forget it at once, so that a connection
        opening it now reads it from the store rather than get the copy held for the watchers
        still closing, and close every one of them with `code`."""
        live = self._live.pop(session_id, None)
        if live is None:
            return
        if not self._live:
            self._emptied.set()
        for subscriber in list(live.subscribers):
            subscriber.finish(code)

    async def close_all(self, code: int, timeout_s: float) -> None:
        """Let every connection send what it has queued and close with `code`; wait for them
        at most `timeout_s` (at least 0.1 s)."""
        closing = []
        for live in list(self._live.values()):
            for subscriber in list(live.subscribers):
                subscriber.finish(code)
                closing.append(asyncio.ensure_future(subscriber.wait_closed()))
        if closing:
            _, late = await asyncio.wait(closing, timeout=max(0.1, timeout_s))
            for waiter in late:
                waiter.cancel()
