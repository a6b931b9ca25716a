"""Stores that fail one write on purpose, for tests of what a lost write leaves behind."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.errors import StorageError
from server.auth import LOCAL_SCOPE
from server.storage.base import Store

__all__ = ["FailsFirstIdleStatus", "FailsFirstRunEnd", "until_idle"]


class FailsFirstIdleStatus:
    """Mixed in before a store class: its first `idle` status write fails, so a run's
    `response_complete` is stored and its session's end is not (what a lost second write
    leaves on MongoDB, or a crash between two commits)."""

    failed = False

    async def update_session(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("status") == "idle" and not self.failed:
            self.failed = True
            raise StorageError("the status could not be stored")
        await super().update_session(*args, **kwargs)  # type: ignore[misc]


class FailsFirstRunEnd:
    """Mixed in before a store class: the first batch that ends a run (its
    `response_complete` and the `idle` status) fails whole, as a full disk fails the last
    commit of a run whose answer was stored."""

    failed = False

    async def store_batch(self, *args: Any, **kwargs: Any) -> list[bytes]:
        frames = kwargs.get("frames") or ()
        if not self.failed and any(f.get("type") == "response_complete" for f in frames):
            self.failed = True
            raise StorageError("database or disk is full")
        return await super().store_batch(*args, **kwargs)  # type: ignore[misc,no-any-return]


async def until_idle(store: Store, session_id: str, timeout: float = 15.0) -> None:
    """Wait until the store shows the session idle (the server's upkeep settles a lost status
    on one of its next rounds), within `timeout`."""
    async with asyncio.timeout(timeout):
        while True:
            record = await store.get_session(LOCAL_SCOPE, session_id)
            if record is not None and record.status == "idle":
                return
            await asyncio.sleep(0.05)  # retry interval, bounded by the deadline above
