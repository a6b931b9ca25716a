"""StoreRelay: several server processes meet in the store, with no broker between them.

On a shared store (MongoDB, or SQLite with `storage.shared`), any process may hold a
connection to a session whose run another process owns. Three polls, each one query per
interval for every session concerned, carry what crosses processes:

- **Events**: for each session a local connection watches but no local run writes, the events
  stored after the last one delivered (`seq > last_seq`), delivered in `seq` order, each
  exactly once (`LiveSession.follow`).
- **Controls**: for each run this process owns, the stops, answers and approval decisions
  other processes left in the store (`server/remote.py`'s `apply_control`).
- **Deletions**: at most once a second, for each followed session that got no new event in
  the round (a deleted session gets none), whether it is still stored; the watchers of one
  another process deleted are closed with 4404, as a local deletion closes them.

A process alone on its store (SQLite by default) starts no relay, and a shared process polls
nothing while it neither follows a session nor owns a run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from agent.errors import StorageError
from server.live import LiveSession
from server.storage.base import Control, Cursor, Store
from server.storage.outage import log_retry

__all__ = ["StoreRelay"]

log = logging.getLogger(__name__)
TAIL_LIMIT = 2000  # events per poll, over every followed session
SESSION_GONE = 4404  # the close code of a deleted session's watchers (docs/wire-protocol.md)
PUSHED_SLOWDOWN = 10  # with change streams waking the relay, polls are only a safety net
DELETION_CHECK_S = 1.0  # deletions are rare: not worth a query on every poll
OUTAGE_POLL_S = 1.0  # the longest wait between polls while the store fails


class StoreRelay:
    """Poll the store for followed sessions' events and for the controls of owned runs."""

    def __init__(
        self,
        store: Store,
        sessions: Mapping[str, LiveSession],
        apply: Callable[[LiveSession, Control], Awaitable[None]],
        interval_s: float,
        gone: Callable[[str, int], None],
    ) -> None:
        """`gone(session_id, close_code)`: a followed session is no longer stored."""
        self._store = store
        self._sessions = sessions
        self._apply = apply
        self._gone = gone
        self._interval_s = interval_s
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self.pushed = False  # True while the store's notices (change streams) arrive
        self._next_deletion_check = 0.0  # time.monotonic() of the next deletion check

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._forever(), name="store-relay"),
                asyncio.create_task(self._listen(), name="store-relay-notices"),
            ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _listen(self) -> None:
        """Wake the relay on the store's notices while it gives them; else poll only."""
        try:
            async for _ in self._store.notices():
                self.pushed = True
                self._wake.set()
        except StorageError as exc:
            log.info("no change notices from the store (%s): following by polling", exc)
        finally:
            self.pushed = False

    async def _forever(self) -> None:
        failures = 0
        while True:
            interval = self._interval_s * (PUSHED_SLOWDOWN if self.pushed else 1)
            if failures:  # the store is away: ask it less often, up to every OUTAGE_POLL_S
                interval = max(interval, min(OUTAGE_POLL_S, self._interval_s * 2**failures))
            try:  # the poll interval, or earlier when the store says something was stored
                await asyncio.wait_for(self._wake.wait(), interval)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.poll()
                failures = 0
            except StorageError as exc:
                failures = min(failures + 1, 16)
                log_retry(log, "following other processes failed", exc)

    async def poll(self) -> None:
        """One round: deliver new events of followed sessions, apply controls of our runs,
        close the watchers of followed sessions another process deleted."""
        advanced = await self._follow()
        await self._controls()
        await self._deletions(advanced)

    async def _follow(self) -> set[str]:
        """Deliver what was stored since each followed session's last event; return the
        sessions that got some."""
        advanced: set[str] = set()
        cursors = {
            sid: Cursor(live.scope, live.last_seq)
            for sid, live in self._sessions.items()
            if live.run is None and live.subscribers and live.stored
        }
        while cursors:
            rows = await self._store.tail_events(cursors, TAIL_LIMIT)
            for session_id, seq, body in rows:
                live = self._sessions.get(session_id)
                if live is not None:
                    live.follow(seq, body)
                    advanced.add(session_id)
            if len(rows) < TAIL_LIMIT:
                return advanced
            cursors = {  # a long backlog: continue at once from what was delivered
                sid: Cursor(live.scope, live.last_seq)
                for sid in cursors
                if (live := self._sessions.get(sid)) is not None and live.run is None
            }
            await asyncio.sleep(0)
        return advanced

    async def _controls(self) -> None:
        owned = {sid: live for sid, live in self._sessions.items() if live.run is not None}
        if not owned:
            return
        for control in await self._store.pending_controls(list(owned)):
            live = owned.get(control.session_id)
            run = None if live is None else live.run
            if live is None or run is None or run.run_id != control.run_id:
                continue
            if not run.take_control(control.key):
                continue
            await self._apply(live, control)

    async def _deletions(self, advanced: set[str]) -> None:
        """Forget followed sessions that are no longer stored, closing their watchers. Only those
        without news are asked about: the status is no guide, as a session deleted right
        after its run ended never shows this process its closing events."""
        now = time.monotonic()
        if now < self._next_deletion_check:
            return
        self._next_deletion_check = now + DELETION_CHECK_S
        quiet = {
            sid: live
            for sid, live in self._sessions.items()
            if live.run is None and live.subscribers and live.stored and sid not in advanced
        }
        if not quiet:
            return
        owners = await self._store.session_owners(list(quiet))
        for sid, live in quiet.items():
            gone = owners.get(sid) != live.scope  # deleted, maybe made again by someone else
            if gone and live.run is None and self._sessions.get(sid) is live:
                self._gone(sid, SESSION_GONE)
