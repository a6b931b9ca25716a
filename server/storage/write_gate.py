"""WriteGate: this process's writes of one session document never overlap each other or a
lease renewal.

FerretDB 1.x applies every update as read-then-replace, so two updates of one document that
overlap can lose one of them. A renewal (`update_many` over the process's running sessions)
that read a session just before its run's last status change was stored, and wrote just
after it, put "running" back over "idle": a finished run left active, which recovery would
later close a second time. A title changed (PATCH) while a run ended could do the same.
MongoDB updates a document atomically and needs none of this; there a write waits at most
for the other write of its session under way, or for one renewal every third of a lease.

Writes of different sessions share the gate; a renewal takes it alone: writes that come while
a renewal waits or runs wait for it, and the renewal waits for the writes already under way.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["WriteGate"]


class WriteGate:
    def __init__(self) -> None:
        self._writes = 0  # session-document writes under way
        self._renewal: asyncio.Future[None] | None = None  # done when the renewal ends
        self._drained: asyncio.Future[None] | None = None  # done when the writes have ended
        self._locks: dict[str, asyncio.Lock] = {}  # one write at a time per session
        self._waiting: Counter[str] = Counter()  # writes holding or awaiting each lock

    @asynccontextmanager
    async def write(self, session_id: str) -> AsyncIterator[None]:
        """Around one write of the session's document."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        self._waiting[session_id] += 1
        try:
            async with lock:
                while self._renewal is not None:
                    await asyncio.shield(self._renewal)
                self._writes += 1
                try:
                    yield
                finally:
                    self._writes -= 1
                    if not self._writes and self._drained is not None:
                        if not self._drained.done():
                            self._drained.set_result(None)
        finally:
            self._waiting[session_id] -= 1
            if not self._waiting[session_id]:
                del self._waiting[session_id], self._locks[session_id]

    @asynccontextmanager
    async def renewal(self) -> AsyncIterator[None]:
        """Around one lease renewal: alone, once the writes under way have ended."""
        while self._renewal is not None:
            await asyncio.shield(self._renewal)
        loop = asyncio.get_running_loop()
        renewal = self._renewal = loop.create_future()
        try:
            if self._writes:
                self._drained = loop.create_future()
                await self._drained
            yield
        finally:
            self._drained = self._renewal = None
            renewal.set_result(None)
