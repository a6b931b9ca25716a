"""LiveSession: one session in memory while anyone watches it or a run works on it.

It owns the session's write order. Every event and message goes through one lock, is stored,
and only then reaches the subscribers, so each connection sees every event once, in `seq`
order, and a replay returns exactly what a live client saw. Writes are shielded: a run
cancelled by a stop cannot leave a write half done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agent.control import RunControl
from agent.messages import Message
from server.storage.base import Scope, SessionRecord, SessionStatus, Store

__all__ = ["ActiveRun", "LiveSession", "Subscriber", "now_ms", "shielded"]

T = TypeVar("T")
log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class Subscriber(Protocol):
    def deliver(self, text: str, seq: int | None) -> None:
        """Queue one frame for sending without waiting; the subscriber handles overflow."""
        ...

    def finish(self, code: int) -> None:
        """Send what is queued, then close the connection with `code`."""
        ...

    async def wait_closed(self) -> None:
        """Return once `finish` has closed the connection."""
        ...


@dataclass(slots=True)
class ActiveRun:
    run_id: str
    control: RunControl
    task: asyncio.Task[None] | None = None


async def shielded(work: Awaitable[T]) -> T:
    """Await `work` so that cancelling the caller does not cancel it."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("shielded write failed after its caller left: %r", task.exception())


class LiveSession:
    """In-memory state of one session: subscribers, the active run, status and last seq."""

    def __init__(
        self, record: SessionRecord, store: Store, *, stored: bool = True, lease_ms: int = 30_000
    ) -> None:
        self.scope = Scope(record.tenant_id, record.user_id)
        self.stored = stored
        self._lease_ms = lease_ms
        self.created_at = record.created_at
        self.session_id = record.session_id
        self.status: SessionStatus = record.status
        self.title = record.title
        self.last_seq = record.last_seq
        self.pending_input: dict[str, Any] | None = record.pending_input
        self.subscribers: set[Subscriber] = set()
        self.run: ActiveRun | None = None
        self._store = store
        self._lock = asyncio.Lock()

    @property
    def idle(self) -> bool:
        """No watcher and no run: the registry may forget this session."""
        return not self.subscribers and self.run is None

    def snapshot(self) -> dict[str, Any]:
        """The `session` frame body, consistent with what subscribers receive next."""
        return {
            "status": self.status,
            "last_seq": self.last_seq,
            "pending_input": self.pending_input,
        }

    async def ensure_stored(self) -> None:
        """Store the session record if this is its first run."""

        async def write() -> None:
            if not self.stored:
                await self._store.create_session(self.scope, self.session_id, self.created_at)
                self.stored = True

        await shielded(self._locked(write))

    async def publish(
        self,
        frames: Sequence[dict[str, Any]],
        *,
        status: SessionStatus | None = None,
        pending_input: dict[str, Any] | None = None,
        run_id: str | None = None,
    ) -> None:
        """Store frames (and a status change), then deliver them to every subscriber."""
        await shielded(self._locked(lambda: self._publish(frames, status, pending_input, run_id)))

    async def save_messages(self, messages: Sequence[Message]) -> None:
        async def write() -> None:
            await self._store.append_messages(self.scope, self.session_id, messages, now_ms())

        await shielded(self._locked(write))

    async def set_title(self, title: str) -> None:
        async def write() -> None:
            await self._store.update_session(self.scope, self.session_id, now_ms(), title=title)
            self.title = title

        await shielded(self._locked(write))

    def deliver_unstored(self, frame_text: str) -> None:
        """Send a frame that could not be stored (the store is failing) to every watcher."""
        for sub in list(self.subscribers):
            sub.deliver(frame_text, None)

    async def _locked(self, work: Callable[[], Awaitable[T]]) -> T:
        async with self._lock:
            return await work()

    async def _publish(
        self,
        frames: Sequence[dict[str, Any]],
        status: SessionStatus | None,
        pending_input: dict[str, Any] | None,
        run_id: str | None,
    ) -> None:
        bodies: list[bytes] = []
        if frames:
            bodies = await self._store.append_events(self.scope, self.session_id, frames, now_ms())
        if status is not None:
            now = now_ms()
            await self._store.update_session(
                self.scope,
                self.session_id,
                now,
                status=status,
                active_run_id=run_id,
                pending_input=pending_input,
                lease_until=None if status == "idle" else now + self._lease_ms,
            )
            self.status = status
            self.pending_input = pending_input
            if status == "idle":
                self.run = None  # before delivery: a chat sent on receiving it must be accepted
        for frame, body in zip(frames, bodies, strict=True):
            seq = int(frame["seq"])
            self.last_seq = seq
            text = body.decode()
            for sub in list(self.subscribers):
                sub.deliver(text, seq)
