"""WriteGate: this process's writes of session documents never overlap its lease renewals.

FerretDB 1.x applies every update as read-then-replace. A renewal (`update_many` over the
process's running sessions) that reads a session just before its run's last status change
is stored and writes just after it puts "running" back over "idle": a finished run left
active, which recovery would later close a second time. MongoDB updates a document
atomically and needs none of this; there a status change waits at most one renewal round
trip, every third of a lease.

Writes share the gate; a renewal takes it alone: writes that come while a renewal waits or
runs wait for it, and the renewal waits for the writes already under way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["WriteGate"]


class WriteGate:
    def __init__(self) -> None:
        self._writes = 0  # session-document writes under way
        self._renewal: asyncio.Future[None] | None = None  # done when the renewal ends
        self._drained: asyncio.Future[None] | None = None  # done when the writes have ended

    @asynccontextmanager
    async def write(self) -> AsyncIterator[None]:
        """Around one write of a session document."""
        while self._renewal is not None:
            await asyncio.shield(self._renewal)
        self._writes += 1
        try:
            yield
        finally:
            self._writes -= 1
            if not self._writes and self._drained is not None and not self._drained.done():
                self._drained.set_result(None)

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
