"""RunSink: where a run's events and messages go, through its session's LiveSession.

Questions and approval requests change the session's status with their frame. Other events,
and the run's messages, queue without waiting (server/live.py); a run's last event is
awaited, so a failed write before it is reported. Everything is stored before any socket
sees it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from agent.events import (
    AgentEvent,
    ApprovalRequested,
    ChatDone,
    InputRequested,
    RunCompleted,
    RunStopped,
)
from agent.messages import Message
from server.events import Event, question_of
from server.live import LiveSession, now_ms
from server.storage.base import SessionStatus

__all__ = ["RunSink"]

_LAST = (RunCompleted, RunStopped, ChatDone)  # awaited: a failed write before them is reported


class RunSink:
    """EventSink of one run: its events in their envelope, status changes, then delivery,
    via the LiveSession."""

    def __init__(self, live: LiveSession, run_id: str) -> None:
        self._live = live
        self._run_id = run_id

    async def emit(self, event: AgentEvent) -> None:
        sent = Event.of_run(event, self._live.session_id, self._run_id, now_ms())
        if isinstance(event, InputRequested):
            pending = asdict(question_of(event))
            await self._live.publish(
                [sent],
                status=SessionStatus.AWAITING_INPUT,
                pending_input=pending,
                run_id=self._run_id,
            )
        elif isinstance(event, ApprovalRequested):  # what waits: in the run's RunControl
            await self._live.publish(
                [sent], status=SessionStatus.AWAITING_APPROVAL, run_id=self._run_id
            )
        elif isinstance(event, _LAST):
            await self._live.publish([sent])
        else:  # queued: stored in order, a failure reported by the run's next awaited write
            await self._live.publish_streamed([sent])

    async def emit_all(self, events: Sequence[AgentEvent]) -> None:
        session, run, now = self._live.session_id, self._run_id, now_ms()
        await self._live.publish([Event.of_run(e, session, run, now) for e in events])

    async def append(self, messages: Sequence[Message]) -> None:
        await self._live.save_messages(messages)
