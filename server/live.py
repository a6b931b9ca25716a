"""LiveSession: one session in memory while anyone watches it or a run works on it.

It owns the session's write order. Every event and message goes through one queue drained by
one writer task, is stored, and only then reaches the subscribers, so each connection sees
every event once, in `seq` order, and a replay returns exactly what a live client saw. Writes
are shielded: a run cancelled by a stop cannot leave a write half done. A subscriber gets each
event in two forms and parses neither: the text the store made of it, to send, and the typed
`Event` (server/events.py), to read.

A run waits for neither its events nor its messages to be stored, only for its status changes
and its last event, unless the store is behind (more than `_QUEUE_HIGH_WATER` of its
session's writes wait behind a batch being stored, or the process's `WriteBacklog` is past
its mark). They are held until the next tick of a shared clock (the write window), also when
they queued while a batch was being stored, so the phases of a step, and the writes of many
sessions, share store round trips instead of taking one each. What is stored is always a
prefix of what the run did, in order, and nothing reaches a client before it is stored.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, TypeVar

import orjson

from agent.clock import now_ms
from agent.control import RunControl
from agent.errors import StorageError
from agent.events import ApprovalRequested, InputRequested
from agent.messages import Message
from server.events import Event, RunEnded, approval_of, question_of
from server.settings import RUN_LEASE_S
from server.storage.base import (
    Lease,
    PartlyStored,
    RunTakenOver,
    Scope,
    SessionRecord,
    SessionStatus,
    StatusChange,
    Store,
)
from server.storage.frames import decode
from server.storage.outage import checked_before_retry

__all__ = [
    "MOVES",
    "ActiveRun",
    "LiveSession",
    "Subscriber",
    "WriteBacklog",
    "allowed_move",
    "next_tick",
    "now_ms",
    "shielded",
]

T = TypeVar("T")
# Queued writes per session before a run waits for storage: the backlog a stop's own write
# may find ahead of it (16 made stops under saturation slower: docs/benchmarks.md).
_QUEUE_HIGH_WATER = 8
# How long a run's events and messages may wait to be stored (and so delivered). Writes made
# within one window share a store round trip, also across sessions: every session's window
# ends on the same ticks of the loop's clock (docs/storage.md, "The write window").
_WRITE_WINDOW_S = 0.005
log = logging.getLogger(__name__)

# A session's status moves (docs/wire-protocol.md). A run starts from idle; it waits for an
# answer or an approval and goes on once given; it ends (its `response_complete`, or recovery
# closing it) from any of its statuses. A question or approval that times out is not a
# move: the run goes on in the waiting status until its next one, so one wait may follow
# another. Staying in a status is always allowed (a new question after one that expired).
# Only a wait without a run (idle to awaiting_*) is refused.
MOVES: dict[SessionStatus, frozenset[SessionStatus]] = {
    SessionStatus.IDLE: frozenset({SessionStatus.RUNNING}),
    SessionStatus.RUNNING: frozenset(
        {SessionStatus.AWAITING_INPUT, SessionStatus.AWAITING_APPROVAL, SessionStatus.IDLE}
    ),
    SessionStatus.AWAITING_INPUT: frozenset(
        {SessionStatus.RUNNING, SessionStatus.AWAITING_APPROVAL, SessionStatus.IDLE}
    ),
    SessionStatus.AWAITING_APPROVAL: frozenset(
        {SessionStatus.RUNNING, SessionStatus.AWAITING_INPUT, SessionStatus.IDLE}
    ),
}


def allowed_move(old: SessionStatus, new: SessionStatus) -> bool:
    """May a session's status go from `old` to `new` (see `MOVES`)?"""
    return new == old or new in MOVES[old]


class Subscriber(Protocol):
    def deliver(self, text: str, seq: int | None, event: Event) -> None:
        """Queue one event for sending without waiting; the subscriber handles overflow.
        `text` is its frame's JSON, to send as is; `event` the same event typed, to read what
        happened from (never `text`); `seq` None: not stored."""
        ...

    def finish(self, code: int) -> None:
        """Send what is queued, then close the connection with `code`."""
        ...

    async def wait_closed(self) -> None:
        """Return once `finish` has closed the connection."""
        ...


class WriteBacklog:
    """Writes handed to the store and not yet stored, over the sessions that share it (the
    registry's: one per process); writes held for the window are not counted. Past `mark`,
    runs wait for their writes again: under load the store and the deliveries then come
    before more run work, which keeps event delays and stops short (docs/benchmarks.md,
    "Messages queued like events"); at ease no run waits for storage."""

    __slots__ = ("mark", "queued")

    def __init__(self, mark: int = 32) -> None:
        self.mark = mark
        self.queued = 0

    @property
    def behind(self) -> bool:
        return self.queued > self.mark


@dataclass(slots=True)
class ActiveRun:
    run_id: str
    control: RunControl
    task: asyncio.Task[None] | None = None
    applied: set[str] = field(default_factory=set)  # keys of the store controls taken
    content: str = ""  # the user's message that started it ("" for a recovered run)
    opened_by: str | None = None  # that message's id in an AG-UI client's list
    # Events sent without being stored (the store failed): stored when its end is repaired,
    # so that a replay has what the client saw.
    told: list[Event] = field(default_factory=list)

    # The run's named transitions: other modules call these, never assign its fields.

    def started(self, task: asyncio.Task[None]) -> None:
        """Record the task that runs this run; a run is started once."""
        if self.task is not None:
            raise RuntimeError(f"run {self.run_id} was started already")
        self.task = task

    def take_control(self, key: str) -> bool:
        """Mark the store control `key` as this process's to apply; False if it was already
        (the relay then leaves it alone)."""
        if key in self.applied:
            return False
        self.applied.add(key)
        return True

    def give_back_control(self, key: str) -> None:
        """Another process's control won `key`: the relay applies it like any other."""
        self.applied.discard(key)

    def told_unstored(self, event: Event) -> None:
        """`event` was sent without being stored: store it when the run's end is repaired."""
        self.told.append(event)

    def opened(self, message_id: str) -> None:
        """The run was started by the AG-UI client's message `message_id` (set once)."""
        if self.opened_by is None:
            self.opened_by = message_id


async def shielded(work: Awaitable[T]) -> T:
    """Await `work` so that cancelling the caller does not cancel it."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("shielded write failed after its caller left: %r", task.exception())


@dataclass(slots=True)
class _Write:
    """One queued write. Consecutive event and message writes are stored together, up to and
    including the first with a status change (stored after them)."""

    future: asyncio.Future[None] | None  # None: a run's event or message nobody waits for
    events: Sequence[Event] = ()
    status: SessionStatus | None = None
    pending_input: dict[str, Any] | None = None  # stored with the status, for other processes
    run_id: str | None = None
    work: Callable[[], Awaitable[None]] | None = None  # anything else (session row, title)
    messages: Sequence[Message] = ()

    @property
    def awaited(self) -> bool:
        return self.future is not None


class LiveSession:
    """In-memory state of one session: subscribers, the active run, status and last seq.

    Every write goes through one queue drained by one task, in order. Consecutive event and
    message writes, and a status change after them, are stored in one `store_batch` call (in
    SQLite one transaction: a fast token stream, or a phase, costs one round trip per batch,
    not per event), then delivered. A write is done by the writer task whatever happens to
    its caller: a run cancelled by a stop cannot leave a write half done.

    Other modules read its fields and change them only through its named transitions
    (`claim_run`, `subscribe`, `run_ended`...), which check the current state first
    (tests/server/test_boundaries.py).
    """

    def __init__(
        self,
        record: SessionRecord,
        store: Store,
        *,
        stored: bool = True,
        lease_ms: int = int(RUN_LEASE_S * 1000),
        backlog: WriteBacklog | None = None,
        write_window_s: float = _WRITE_WINDOW_S,
    ) -> None:
        self.scope = Scope(record.tenant_id, record.user_id)
        self.stored = stored
        self._lease_ms = lease_ms
        # The latest lease given to this process's run here and that run (None: no run holds
        # one), when the store last confirmed it (monotonic), and whether another process
        # took it over.
        self.lease_given: int | None = None
        self._lease_run: str | None = None
        self._lease_confirmed = 0.0
        self.taken_over = False
        self.created_at = record.created_at
        self.session_id = record.session_id
        self.status = SessionStatus(record.status)
        self.title = record.title
        self.last_seq = record.last_seq
        # What waits for the user in a run this process does not run (another process's, or
        # one being recovered): from the stored record, then the run's stored events. A run
        # of ours has it in its RunControl, which it waits on (see `pending_input`).
        self._input_elsewhere: dict[str, Any] | None = record.pending_input
        self._approval_elsewhere: dict[str, Any] | None = None
        self.subscribers: set[Subscriber] = set()
        self.run: ActiveRun | None = None
        self.ended_run: str | None = None  # the last run that ended here, its end sent live
        self._store = store
        self._writes: deque[_Write] = deque()
        self._backlog = backlog or WriteBacklog()
        self._writer: asyncio.Task[None] | None = None
        self._window = write_window_s
        self._held: asyncio.TimerHandle | None = None  # ends the window of the writes held
        self._unreported: Exception | None = None  # a write nobody awaited failed
        # A batch of run output failed (the store refused it, or stayed away past the
        # tolerance): nothing more of the run is stored or delivered here, or a watcher
        # could see seq N+2 after N, or deltas of one phase in another. See `mend`.
        self.broken: StorageError | None = None

    @property
    def idle(self) -> bool:
        """No watcher and no run: the registry may forget this session."""
        return not self.subscribers and self.run is None

    @property
    def pending_input(self) -> dict[str, Any] | None:
        """The question waiting for the user's answer. A run of ours: read from its
        RunControl, the one copy the run itself waits on, while the status says a question
        waits (an answer clears it at once, everywhere). Another process's run: what its
        stored record and events say."""
        if self.run is None:
            return self._input_elsewhere
        question = self.run.control.pending
        waiting = self.status == SessionStatus.AWAITING_INPUT
        return asdict(question) if waiting and question is not None else None

    @property
    def pending_approval(self) -> dict[str, Any] | None:
        """The tool call waiting for the user's decision, read like `pending_input` (another
        process's: from its stored events; a pending approval is not in the record)."""
        if self.run is None:
            return self._approval_elsewhere
        approval = self.run.control.pending_approval
        waiting = self.status == SessionStatus.AWAITING_APPROVAL
        return asdict(approval) if waiting and approval is not None else None

    def snapshot(self) -> dict[str, Any]:
        """The `session` frame body, consistent with what subscribers receive next."""
        return {
            "status": self.status,
            "last_seq": self.last_seq,
            "pending_input": self.pending_input,
            "pending_approval": self.pending_approval,
        }

    async def ensure_stored(self, title: str = "") -> None:
        """Store the session record, with `title`, if this is its first run."""
        if self.stored:
            return  # the usual case: no trip through the write queue

        async def write() -> None:
            if not self.stored:
                await self._store.create_session(
                    self.scope, self.session_id, self.created_at, title
                )
                self.stored, self.title = True, title

        await self._submit(_Write(self._future(), work=write))

    async def publish(
        self,
        events: Sequence[Event],
        *,
        status: SessionStatus | None = None,
        pending_input: dict[str, Any] | None = None,
        run_id: str | None = None,
    ) -> None:
        """Store events (and a status change), then deliver them to every subscriber.
        `pending_input` is the question stored with the status, for other processes and
        restarts; here the run's RunControl has it."""
        await self._submit(_Write(self._future(), events, status, pending_input, run_id))

    async def publish_streamed(self, events: Sequence[Event]) -> None:
        """Queue run events without waiting for them to be stored (see `_submit`). They are
        delivered once stored, in order."""
        await self._submit(_Write(None, events))

    async def save_messages(self, messages: Sequence[Message]) -> None:
        """Queue messages without waiting for them to be stored (see `_submit`), in order with
        the run's events: what is stored is always a prefix of what the run did."""
        await self._submit(_Write(None, messages=messages))

    async def set_title(self, title: str) -> None:
        async def write() -> None:
            await self._store.update_session(self.scope, self.session_id, now_ms(), title=title)
            self.title = title

        await self._submit(_Write(self._future(), work=write))

    def follow(self, seq: int, body: bytes) -> bool:
        """Deliver an event another process stored (its run is not ours); keep status and
        pending question in step with it. False, delivering nothing, unless it is the next
        event: a run of ours delivers its own, and a gap waits for the next poll. An event of
        the run that last ended here is taken without being sent."""
        if self.run is not None or seq != self.last_seq + 1:
            return False
        event = decode(body)  # another process built it: read from the store
        if self.ended_run is not None and event.run_id == self.ended_run:
            # Stored after its end was sent live: a write the store took but whose answer a
            # failure lost, or the end stored once the store was back. Watchers here saw
            # `response_complete` already; a replay has it in order.
            self.last_seq = seq
            return True
        self.settle(event)
        self.last_seq = seq
        text = body.decode()
        for sub in list(self.subscribers):
            sub.deliver(text, seq, event)
        return True

    def settle(self, event: Event) -> None:
        """Keep status and pending question or approval in step with a stored event of a run
        another process runs."""
        happened = event.event
        if isinstance(happened, InputRequested):
            question = asdict(question_of(happened))
            self._move(
                SessionStatus.AWAITING_INPUT, question, self._approval_elsewhere, mirrored=True
            )
        elif isinstance(happened, ApprovalRequested):
            approval = asdict(approval_of(happened))
            self._move(
                SessionStatus.AWAITING_APPROVAL, self._input_elsewhere, approval, mirrored=True
            )
        elif isinstance(happened, RunEnded):
            self._move(SessionStatus.IDLE, mirrored=True)
        elif event.run_id:
            self._move(SessionStatus.RUNNING, mirrored=True)

    def notify(self, event: Event) -> None:
        """Send an event about the session that is not a run's (no seq, nothing stored) to
        every watcher of it in this process."""
        self._send_unstored(event)

    def mend(self) -> None:
        """The run that lost a batch has ended, and the store refused that batch (it did not
        time out): nothing of it can turn up stored later, so later runs may write again."""
        self.broken = None

    def deliver_unstored(self, event: Event) -> None:
        """Send a run's event that could not be stored (the store is failing) to every
        watcher, without the `seq` it was not given."""
        self._send_unstored(replace(event, seq=None))

    def _send_unstored(self, event: Event) -> None:
        text = orjson.dumps(event.frame()).decode()  # its one serialization: never stored
        for sub in list(self.subscribers):
            sub.deliver(text, None, event)

    # -- named transitions: the only ways other modules change this session's state ---------

    def subscribe(self, subscriber: Subscriber) -> None:
        """Deliver the session's frames to `subscriber` from now on."""
        self.subscribers.add(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Deliver nothing more to `subscriber` (gone already: nothing happens)."""
        self.subscribers.discard(subscriber)

    def claim_run(self, run: ActiveRun) -> None:
        """Make `run` the session's run. The caller checked that it had none (ProtocolError
        `run_in_progress` otherwise), with no wait since: a run held here is a bug."""
        if self.run is not None:
            raise RuntimeError(f"session {self.session_id} has run {self.run.run_id} already")
        self.run = run

    def release_run(self, run: ActiveRun) -> None:
        """`run` no longer holds the session, if it still does (a chat sent on receiving its
        `response_complete` may own the session already)."""
        if self.run is run:
            self.run = None

    def ended_unstored(self, run: ActiveRun) -> None:
        """`run` ended but its end could not be stored: the session is idle here at once (a
        chat may start), while the store shows the run until its end is repaired."""
        self._move(SessionStatus.IDLE)
        self.release_run(run)

    def run_ended(self, run: ActiveRun) -> None:
        """`run`'s `response_complete` was sent: its events stored later (see `follow`) are
        not sent again."""
        self.ended_run = run.run_id
        self.release_run(run)

    def answered_elsewhere(self) -> None:
        """An answer or decision for the run another process runs was taken: the run goes
        on. Said here at once, not with its next event (read at the relay's next poll).
        Nothing changes unless it still waits here: its end may have been followed since."""
        if self.run is None and self.status.waiting:
            self._move(SessionStatus.RUNNING)

    def approval_elsewhere(self, event: ApprovalRequested) -> None:
        """The run another process runs waits for approval of the call `event` asks about (a
        stored `agent_tool_approval`: a pending approval lives with its run, not in the
        store)."""
        if self.run is None:
            self._approval_elsewhere = asdict(approval_of(event))

    def caught_up(self, seq: int) -> None:
        """Events up to `seq` of this session were stored by another writer (recovery closing
        a run): count them, so the next one is told apart from a gap."""
        self.last_seq = max(self.last_seq, seq)

    def _move(
        self,
        status: SessionStatus,
        input_elsewhere: dict[str, Any] | None = None,
        approval_elsewhere: dict[str, Any] | None = None,
        *,
        mirrored: bool = False,
    ) -> None:
        """The one place the status changes, with what waits for the user in a run another
        process runs (a run of ours has that in its RunControl). A move `MOVES`
        does not allow is a bug, logged, and made all the same: the store has it already.
        A `mirrored` move follows another process's stored events, which may jump (a status
        stored after its events, events counted by `caught_up` without being read): only
        noted."""
        if not allowed_move(self.status, status):
            level = logging.DEBUG if mirrored else logging.WARNING
            log.log(
                level,
                "session %s: unexpected status move %s -> %s%s",
                self.session_id,
                self.status,
                status,
                " (followed from the store)" if mirrored else "",
            )
        self.status = SessionStatus(status)
        self._input_elsewhere, self._approval_elsewhere = input_elsewhere, approval_elsewhere

    # -- the writer ---------------------------------------------------------------------------

    def _future(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    async def _submit(self, write: _Write) -> None:
        """Queue `write`, and wait until it is stored if it is `awaited`. A run's events and
        messages are not, unless the store is behind (a long queue here, or the process's
        backlog): then they wait too, so a fast run cannot get ahead of storage and a stop
        queued behind it stays quick. A write that failed with nobody waiting is raised by
        the session's next write, once."""
        failed, self._unreported = self._unreported, None
        if failed is not None:
            raise failed
        if self.broken is not None:
            raise StorageError(str(self.broken)) from self.broken
        self._enqueue(write)
        if write.future is not None:
            await write.future  # a cancelled caller cancels only this notice, not the write

    def _enqueue(self, write: _Write) -> None:
        """Queue `write`. A write somebody waits for starts the writer at once, taking what
        is held with it; a run's event or message is held until the window's tick. The run
        waits for it after all when the store is behind: the process's backlog is past its
        mark, or this session's writes pile up behind a batch being stored (writes held for
        the window are not behind anything)."""
        self._writes.append(write)
        writing = self._writer is not None and not self._writer.done()
        behind = self._backlog.behind or (writing and len(self._writes) > _QUEUE_HIGH_WATER)
        if behind and write.future is None:
            write.future = self._future()  # the run waits for this one
        if writing:
            return  # the writer takes it with its next batch
        if write.awaited or self._window <= 0:
            self._start_writer()
        elif self._held is None:
            self._hold()

    def _hold(self) -> None:
        """Start the writer on the window's next tick."""
        loop = asyncio.get_running_loop()
        self._held = loop.call_at(next_tick(loop.time(), self._window), self._start_writer)

    def _start_writer(self) -> None:
        if self._held is not None:
            self._held.cancel()
            self._held = None
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        """Store the queued writes batch by batch. What a run queued while a batch was being
        stored waits for the window's next tick, with whatever else it queues meanwhile,
        unless somebody waits for it."""
        writes = self._writes
        first = True
        while writes:
            if not first and self._window > 0 and not any(write.awaited for write in writes):
                self._hold()
                return
            first = False
            batch = [writes.popleft()]
            while _open(batch[-1]) and writes and writes[0].work is None:
                batch.append(writes.popleft())
            self._backlog.queued += len(batch)
            try:
                await self._apply(batch)
            except Exception as exc:  # noqa: BLE001 - the waiting callers get the error
                error = exc  # anything but a StorageError is a bug: the run reports it as one
                if not isinstance(exc, StorageError):
                    log.error("session %s: a write failed", self.session_id, exc_info=exc)
                failed = batch
                if isinstance(exc, StorageError) and any(w.events or w.messages for w in batch):
                    # What the run did after the lost batch must not be stored without it.
                    self.broken, failed = exc, [*batch, *writes]
                    writes.clear()
                if not any(write.awaited for write in failed):
                    self._unreported = error  # reported once, by the session's next write
                for write in failed:
                    if write.future is not None and not write.future.done():
                        write.future.set_exception(error)
                continue
            finally:
                self._backlog.queued -= len(batch)
            for write in batch:
                if write.future is not None and not write.future.done():
                    write.future.set_result(None)

    async def _apply(self, batch: list[_Write]) -> None:
        head, last = batch[0], batch[-1]
        if head.work is not None:
            await head.work()
            return
        events = [e for write in batch for e in write.events]
        frames = [e.draft() for e in events]  # numbered and serialized by the store, once
        messages = [m for write in batch for m in write.messages]
        now, change, lease = now_ms(), None, None
        await self._check_lease(now)
        if last.status is not None:
            lease = None if last.status == SessionStatus.IDLE else now + self._lease_ms
            change = StatusChange(last.status, last.run_id, last.pending_input, lease)
            if lease is not None:  # given, whether or not the store answers
                earlier = self.lease_given if self._lease_run == last.run_id else None
                self.lease_given, self._lease_run = max(lease, earlier or 0), last.run_id
                if earlier is None:  # the run's first: it runs from now, stored or not yet
                    self._lease_confirmed = lease_clock()
        try:
            with checked_before_retry(lambda: self._check_lease(now_ms())):
                bodies = await self._store.store_batch(
                    self.scope,
                    self.session_id,
                    now,
                    frames=frames,
                    messages=messages,
                    status=change,
                )
        except PartlyStored as exc:  # its events are stored: they are delivered all the same
            self._deliver(events, frames, exc.bodies)
            raise
        if last.status is not None:
            self._move(last.status)  # what waits: in the run's RunControl
            if lease is not None:
                self._lease_confirmed = lease_clock()
            if last.status == SessionStatus.IDLE:
                # Before delivery: a chat sent on receiving it must be accepted.
                self.run, self.lease_given = None, None
        self._deliver(events, frames, bodies)

    async def renew_lease(self) -> bool:
        """Renew our run's lease on a shared store, in order with the session's writes (a
        renewal and a status change never race: each knows the lease the other gave). False:
        another process took the run over, and nothing more of it may be written."""
        write = _Write(self._future(), work=lambda: self._renew(now_ms()))
        await self._submit(write)
        return not self.taken_over

    async def _check_lease(self, now: int) -> None:
        """Before a write of our run on a shared store: when the lease may have run out (no
        renewal for half its length: this process was paused, or cut off from the store),
        renew it first, and write nothing if another process has taken the run over."""
        if not self._store.shared:
            return  # one process: nobody else claims its runs
        if not self.taken_over and lease_clock() - self._lease_confirmed > self._lease_ms / 2000:
            await self._renew(now)
        if self.taken_over:
            raise RunTakenOver(f"the run of session {self.session_id} was taken over")

    async def _renew(self, now: int) -> None:
        run = self.run
        if run is None or self._lease_run != run.run_id or self.lease_given is None:
            return  # no lease of this run yet (or the end of an earlier one was not stored)
        lease = Lease(self.session_id, run.run_id, self.lease_given)
        until = now + self._lease_ms
        if self.session_id in await self._store.renew_leases([lease], until):
            self.lease_given = max(until, self.lease_given)
            self._lease_confirmed = lease_clock()
        else:
            self.taken_over = True

    def _deliver(
        self, events: list[Event], frames: list[dict[str, Any]], bodies: list[bytes]
    ) -> None:
        """Send each stored event: its stored text to write, the event, numbered, to read.
        The store gave each of `frames` (the events' drafts) its `seq`."""
        for event, frame, body in zip(events, frames, bodies, strict=True):
            seq = int(frame["seq"])
            self.last_seq = seq
            text, sent = body.decode(), event.numbered(seq)
            for sub in list(self.subscribers):
                sub.deliver(text, seq, sent)


def lease_clock() -> float:
    """The clock a run's lease is confirmed by (monotonic: a pause of the process counts)."""
    return time.monotonic()


def next_tick(now: float, window: float) -> float:
    """The first multiple of `window` after `now`: where every session's window ends."""
    tick = (math.floor(now / window) + 1) * window
    return tick if tick > now else tick + window


def _open(write: _Write) -> bool:
    """May later writes join this one's batch? Not after a status change or other work."""
    return write.work is None and write.status is None
