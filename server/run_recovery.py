"""RunRecovery: close the runs nobody will finish, and keep this process's runs claimed.

Two kinds of runs stay open in the store: those of a process that died (closed at startup,
or on a shared store once their lease expired), and those whose end could not be stored
(queued, and closed once the store is back). Either is closed the same way: `agent_stopped`
("interrupted"), then `response_complete`, with the conversation repaired; a run whose
answer, stop or error was stored and only its end was not gets just its `response_complete`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.control import RunControl
from agent.errors import StorageError
from agent.events import (
    AgentEvent,
    AnswerDelta,
    ChatDelta,
    ChatDone,
    ObserveDelta,
    ReasonDelta,
    RunCompleted,
    RunStopped,
    StopReason,
    ThinkingDelta,
)
from agent.run import RunLimits
from agent.stopping import close_interrupted
from server.events import Event, RunEnded, RunFailed, ServerEvent, Unrecognized, step_of
from server.live import ActiveRun, LiveSession, now_ms, shielded
from server.relay import StoreRelay
from server.run_context import BuildContext
from server.storage.base import Scope, SessionRecord, SessionStatus, Store, UnfinishedRun
from server.storage.frames import read_decoded
from server.storage.outage import log_retry
from server.versions import history_on_path

__all__ = ["CutShort", "Repairs", "RunRecovery", "where_it_stopped"]

log = logging.getLogger(__name__)


class Repairs(Protocol):
    """The queue of runs whose end could not be stored (RunRecovery implements it)."""

    def pending(self, session_id: str) -> UnfinishedRun | None: ...

    def defer(self, item: UnfinishedRun, told: Sequence[Event] = ()) -> None: ...

    async def repair(self, item: UnfinishedRun) -> None: ...


class RunRecovery:
    """Recover dead processes' runs, renew our leases, and settle runs queued for repair."""

    def __init__(
        self,
        *,
        store: Store,
        sessions: Mapping[str, LiveSession],
        context: BuildContext,
        release_run: Callable[[str, str], Awaitable[None]],
        relay: StoreRelay | None,
        lease_ms: int,
        limits: RunLimits,
    ) -> None:
        self._store = store
        self._live = sessions  # the registry's, read only
        self._context = context
        self._release_run = release_run  # gives back a run's slots in the shared store
        self._relay = relay
        self._lease_ms = lease_ms
        self._limits = limits  # the configured ones: an interrupted stop reports usage as usual
        self._needs_repair: dict[str, UnfinishedRun] = {}  # runs that ended while storage failed
        self._told: dict[str, Sequence[Event]] = {}  # what their clients were sent
        self._repairing: dict[str, asyncio.Future[None]] = {}  # the repair under way, by session
        self._upkeep: asyncio.Task[None] | None = None

    # -- repair queue ------------------------------------------------------------------------

    def pending(self, session_id: str) -> UnfinishedRun | None:
        """The session's run whose end is still to be stored, if any."""
        return self._needs_repair.get(session_id)

    def defer(self, item: UnfinishedRun, told: Sequence[Event] = ()) -> None:
        """Queue a run whose end could not be stored, to be closed once the store is back;
        `told`: events its clients were sent unstored (its `error`), stored first then."""
        self._needs_repair[item.session_id] = item
        self._told[item.session_id] = told

    async def repair(self, item: UnfinishedRun) -> None:
        """Close a run whose end could not be stored; keep it for later if the store fails.

        One repair of a session at a time: the upkeep and a client opening the session ask
        at once when the store comes back, and two would each store the run's close."""
        flight = self._repairing.get(item.session_id)
        if flight is None:
            flight = asyncio.ensure_future(self._repair_once(item))
            self._repairing[item.session_id] = flight
            flight.add_done_callback(lambda _: self._repairing.pop(item.session_id, None))
        await shielded(flight)

    async def _repair_once(self, item: UnfinishedRun) -> None:
        if self._needs_repair.get(item.session_id) != item:
            return  # settled by the repair this caller waited behind
        try:
            await self._recover_one(item, told=self._told.get(item.session_id, ()))
        except StorageError:
            return
        self._needs_repair.pop(item.session_id, None)
        self._told.pop(item.session_id, None)

    # -- dead processes ----------------------------------------------------------------------

    async def recover(self) -> int:
        """Close runs a dead process left open: `agent_stopped` ("interrupted"), then
        `response_complete`, with the conversation repaired. Return how many.

        A store used by one process (SQLite) closes every run it shows active at startup; on
        a shared store (MongoDB) only runs whose lease expired are claimed and closed.
        """
        now = now_ms()
        unfinished = await self._store.unfinished_runs(now if self._store.shared else None)
        closed = 0
        for item in unfinished:
            held = self._live.get(item.session_id)
            if held is not None and (held.run is not None or not self._store.shared):
                continue  # ours and alive
            if self._store.shared and not await self._store.claim_run(
                item, now, now + self._lease_ms
            ):
                continue  # another process took it
            await shielded(self._recover_one(item, followed=True))
            closed += 1
        return closed

    def start_upkeep(self) -> None:
        """Renew this process's run leases, close expired runs of dead processes (shared
        stores), and settle runs that ended while the store was down."""
        if self._upkeep is None:
            self._upkeep = asyncio.create_task(self._upkeep_forever(), name="session-upkeep")
        if self._relay is not None:
            self._relay.start()

    async def stop_upkeep(self) -> None:
        if self._relay is not None:
            await self._relay.stop()
        if self._upkeep is not None:
            self._upkeep.cancel()
            await asyncio.gather(self._upkeep, return_exceptions=True)
            self._upkeep = None

    async def _upkeep_forever(self) -> None:
        period = max(0.2, self._lease_ms / 3000)
        ticks = 0
        while True:
            await asyncio.sleep(period)  # a timer, not synchronization: leases are time-based
            ticks += 1
            try:
                await self._renew_leases()
                for item in list(self._needs_repair.values()):
                    await self.repair(item)
                if self._store.shared and ticks % 3 == 0:
                    await self.recover()
            except StorageError as exc:
                log_retry(log, "session upkeep failed", exc)

    async def _renew_leases(self) -> None:
        """Renew the lease of every run of ours; a run another process has taken over (our
        lease ran out while this process was paused or cut off) is abandoned, unrecorded.
        A store one process owns needs none: nobody else claims its runs."""
        if not self._store.shared:
            return
        held = [live for live in self._live.values() if live.run is not None]
        kept = await asyncio.gather(*(live.renew_lease() for live in held), return_exceptions=True)
        for live, ours in zip(held, kept, strict=True):
            if isinstance(ours, StorageError):
                log_retry(log, "a run lease could not be renewed", ours)
            elif isinstance(ours, BaseException):
                raise ours
            elif not ours and live.run is not None:
                live.run.control.abandon()

    def _new_live(self, record: SessionRecord) -> LiveSession:
        return LiveSession(record, self._store, lease_ms=self._lease_ms)

    async def _recover_one(
        self,
        item: UnfinishedRun,
        *,
        followed: bool = False,
        told: Sequence[Event] = (),
    ) -> None:
        """Close the run in the store. `followed`: it died in another process, so watchers
        here have not seen it end and get the closing events; else they saw it end live, and
        `told` is what they were sent unstored, stored first."""
        record = await self._store.get_session(item.scope, item.session_id)
        if record is None:
            return
        last = await self._last_event(record)
        ours = last.run_id == item.run_id
        if ours and isinstance(last.event, RunEnded):  # only its status was not stored
            await self._store.update_session(
                item.scope, item.session_id, now_ms(), status=SessionStatus.IDLE, active_run_id=None
            )
            if self._store.shared:
                await self._release_run(item.session_id, item.run_id)
            return
        live = self._new_live(record)  # detached: watchers already saw this run end live
        run = ActiveRun(item.run_id or uuid.uuid4().hex, RunControl())
        if not (ours and isinstance(last.event, _ENDINGS)):
            ctx = self._context(live, run, self._limits, None)
            history = await history_on_path(self._store, item.scope, item.session_id)
            cut = await self._cut_short(live, run.run_id)
            shown = (cut.phase, cut.text) if cut.phase is not None else None
            why = await self._why_closed(item)
            if told:
                await live.publish(told)
            await close_interrupted(ctx, history, cut.step, why, shown)
        elif told:
            await live.publish(told)
        # else the run ended (its answer, stop or error is stored) and only its end was not
        end = Event(RunEnded(), live.session_id, run.run_id, now_ms())
        await live.publish([end], status=SessionStatus.IDLE)
        if self._store.shared:
            await self._release_run(item.session_id, run.run_id)
        held = self._live.get(item.session_id)
        if followed and held is not None and self._relay is not None and held.run is None:
            await self._relay.poll()  # its watchers follow the closing events now
        elif held is not None:  # keep the in-memory view in step with what was stored
            held.caught_up(live.last_seq)

    async def _why_closed(self, item: UnfinishedRun) -> StopReason:
        """`user` when somebody asked to stop the run and its process died before it read
        the request (the stop was accepted: it is honoured, late); else `interrupted`."""
        controls = await self._store.pending_controls([item.session_id])
        asked = any(c.kind == "stop" and c.run_id == item.run_id for c in controls)
        return "user" if asked else "interrupted"

    async def _last_event(self, record: SessionRecord) -> Event:
        """The session's last stored event (one that says nothing for none). It tells how far a
        run's end got: its `response_complete` stored without the status (MongoDB's second
        write lost), its answer, stop or error stored without the `response_complete` (a
        full disk at the last commit), or neither (the process died mid-run)."""
        scope = Scope(record.tenant_id, record.user_id)
        last = await read_decoded(self._store, scope, record.session_id, record.last_seq - 1, 1)
        return last[0] if last else Event(Unrecognized({}), record.session_id)

    async def _cut_short(self, live: LiveSession, run_id: str) -> CutShort:
        """Where the dead run stopped: its step from its events (a step's Reason is stored
        only when it ends, so the conversation alone would say one less), and the text it
        was showing, which a stop keeps and the dead process could not store."""
        return await where_it_stopped(
            self._store, live.scope, live.session_id, live.last_seq, run_id
        )


# A run's last event before its `response_complete`, once it has ended on its own.
_ENDINGS = (RunCompleted, RunStopped, ChatDone, RunFailed)
_BACK_WINDOW = 256  # events read per query, from the end of the session backwards


@dataclass(frozen=True)
class CutShort:
    """Where a dead run stopped: the last step it showed starting, and the text of the phase
    it was streaming (`phase` None: none was), which its stored messages do not hold."""

    step: int
    phase: str | None = None
    text: str = ""


# The phase whose text each delta event shows (an answer continues the phase that shows it).
_DELTA_PHASES: dict[type[Any], str] = {
    ReasonDelta: "reason",
    ObserveDelta: "observe",
    AnswerDelta: "summarize",
    ChatDelta: "chat",
}
_DELTAS = (ReasonDelta, ObserveDelta, AnswerDelta, ChatDelta)


async def where_it_stopped(
    store: Store, scope: Scope, session_id: str, last_seq: int, run_id: str
) -> CutShort:
    """Where `run_id`, the session's last run, stopped: read from `last_seq` backwards, only
    as far as the run goes, so a long history costs nothing."""
    step, end, window = 0, last_seq, _BACK_WINDOW
    ours: list[AgentEvent | ServerEvent] = []  # the run's events, oldest first
    while end > 0:
        after = max(0, end - window)
        events = await read_decoded(store, scope, session_id, after, end - after)
        mine = [e.event for e in events if e.run_id == run_id]
        ours[:0] = mine
        step = max([step, *(step_of(e) for e in mine)])
        if any(e.run_id not in (run_id, None) for e in events):
            break  # the run's first event is in this window
        end, window = after, window * 2
    phase: str | None = None
    text: list[str] = []
    for event in ours:
        if isinstance(event, _DELTAS):
            shows = _DELTA_PHASES[type(event)]
            if phase is None or (shows != phase and not isinstance(event, AnswerDelta)):
                phase, text = shows, []
            text.append(event.delta)
        elif not isinstance(event, ThinkingDelta):  # thinking is never kept
            phase, text = None, []  # the phase ended (its message is stored) or another began
    return CutShort(step, phase, "".join(text))
