"""Stops, answers and approval decisions for runs of other processes (shared stores).

A frame that steers a run arrives at whichever process holds the connection. When the run is
not in this process, the frame becomes a `Control` in the store, which the owner's relay
applies (`apply_control`) as if the frame had come to it. Answers and decisions are claimed
in the store even by the owner, under a key unique per question or call, so exactly one of two
concurrent answers wins, whichever processes they reach.
"""

from __future__ import annotations

import logging
from typing import Any

from agent import control
from agent.control import Decision, DecisionError
from agent.events import ApprovalRequested
from agent.validation import quoted
from server.live import ActiveRun, LiveSession, now_ms
from server.protocol import ProtocolError
from server.storage.base import Control, ControlKind, SessionRecord, SessionStatus, Store
from server.storage.frames import read_decoded

__all__ = [
    "apply_control",
    "check_decision",
    "claim",
    "decide_elsewhere",
    "find_pending_approval",
    "not_awaiting_input",
    "already_decided",
    "answer_elsewhere",
    "refused",
    "stop_elsewhere",
]

log = logging.getLogger(__name__)


def not_awaiting_input() -> ProtocolError:
    return ProtocolError("not_awaiting_input", "No question is waiting for an answer.")


def check_question(waiting: str, meant: str | None) -> None:
    """An answer naming its question (`tool_call_id`) is refused unless that one is waiting."""
    if meant is not None and meant != waiting:
        raise ProtocolError(
            "not_awaiting_input",
            f"The question of call {quoted(meant)} is not waiting for an answer "
            f"(the one waiting is {waiting!r}).",
        )


def already_decided(tool_call_id: str) -> ProtocolError:
    return refused(control.already_decided(tool_call_id))


def refused(exc: DecisionError) -> ProtocolError:
    """The protocol error for a decision the run's control refused."""
    return ProtocolError(exc.code, exc.message)  # type: ignore[arg-type]


async def _run_elsewhere(store: Store, live: LiveSession) -> SessionRecord | None:
    """The stored session while another process runs it (shared store), else None."""
    if not store.shared or live.run is not None:
        return None
    record = await store.get_session(live.scope, live.session_id)
    if record is None or record.status == SessionStatus.IDLE or record.active_run_id is None:
        return None
    if live.run is not None:  # a run of ours started meanwhile
        return None
    return record


async def claim(
    store: Store,
    live: LiveSession,
    run: ActiveRun,
    key: str,
    kind: ControlKind,
    payload: dict[str, Any],
) -> bool:
    """Claim a control for a run of ours in the store (shared stores); False if another
    process's control took the key first, which the relay then applies."""
    if not store.shared:
        return True
    run.take_control(key)  # ours: the relay must not apply it a second time
    control = Control(live.session_id, run.run_id, key, kind, payload)
    if await store.send_control(live.scope, control, now_ms()):
        return True
    run.give_back_control(key)  # the winner's, stored under the same key
    return False


async def stop_elsewhere(store: Store, live: LiveSession) -> None:
    record = await _run_elsewhere(store, live)
    if record is None or record.active_run_id is None:
        raise ProtocolError("no_active_run", "There is no active run to stop.")
    run_id = record.active_run_id
    stop = Control(live.session_id, run_id, f"stop:{run_id}", "stop", {})
    await store.send_control(live.scope, stop, now_ms())  # a second stop: silent


async def answer_elsewhere(
    store: Store, live: LiveSession, content: str, tool_call_id: str | None
) -> None:
    record = await _run_elsewhere(store, live)
    pending = None if record is None else record.pending_input
    if record is None or record.active_run_id is None or not pending:
        raise not_awaiting_input()
    check_question(str(pending.get("tool_call_id")), tool_call_id)
    key = f"answer:{pending.get('tool_call_id')}"
    answer = Control(live.session_id, record.active_run_id, key, "answer", {"content": content})
    if not await store.send_control(live.scope, answer, now_ms()):
        raise not_awaiting_input()
    live.answered_elsewhere()


async def decide_elsewhere(store: Store, live: LiveSession, payload: dict[str, Any]) -> None:
    call_id = str(payload["tool_call_id"])
    record = await _run_elsewhere(store, live)
    if (
        record is None
        or record.active_run_id is None
        or record.status != SessionStatus.AWAITING_APPROVAL
    ):
        raise ProtocolError("not_awaiting_approval", "No tool call is waiting for approval.")
    waiting = (live.pending_approval or {}).get("tool_call_id")
    if waiting is not None and waiting != call_id:
        raise refused(control.not_the_pending_call(waiting, call_id))
    key = f"decision:{call_id}"
    decision = Control(live.session_id, record.active_run_id, key, "decision", payload)
    if not await store.send_control(live.scope, decision, now_ms()):
        raise already_decided(call_id)
    live.answered_elsewhere()  # the run goes on, as after a local answer or decision


def check_decision(run: ActiveRun, tool_call_id: str) -> None:
    """Raise the ProtocolError a decision on `tool_call_id` would meet, before claiming it."""
    if f"decision:{tool_call_id}" in run.applied:
        raise already_decided(tool_call_id)
    pending = run.control.pending_approval
    if pending is None:
        raise ProtocolError("not_awaiting_approval", "No tool call is waiting for approval.")
    if pending.tool_call_id != tool_call_id:
        raise refused(control.not_the_pending_call(pending.tool_call_id, tool_call_id))


async def apply_control(live: LiveSession, control: Control) -> None:
    """Act on a control another process stored for a run of ours, as if sent here."""
    run = live.run
    if run is None or run.run_id != control.run_id:
        return
    if control.kind == "stop":
        run.control.request_stop("user")
    elif control.kind == "answer":
        pending = run.control.pending
        if pending is not None and control.key == f"answer:{pending.tool_call_id}":
            if run.control.answer(str(control.payload.get("content", ""))):
                await live.publish([], status=SessionStatus.RUNNING, run_id=run.run_id)
    else:
        payload = control.payload
        decision = Decision(bool(payload.get("approve")), str(payload.get("reason", "")))
        try:
            run.control.decide(str(payload.get("tool_call_id")), decision)
        except DecisionError as exc:
            log.info("a decision from another process came too late: %s", exc.message)
            return
        await live.publish([], status=SessionStatus.RUNNING, run_id=run.run_id)


async def settle_from_last_event(store: Store, live: LiveSession) -> None:
    """A run's events may be stored before its status (MongoDB writes them one after the
    other): a session opened between the two would show the status before them (running
    while a question waits, or after the run ended) until the run's next event, which may
    never come. The last event says where the run is."""
    seq = live.last_seq
    last = await read_decoded(store, live.scope, live.session_id, seq - 1, 1)
    if last and live.last_seq == seq:  # else a newer event has settled it meanwhile
        live.settle(last[0])


async def find_pending_approval(store: Store, live: LiveSession) -> None:
    """The call another process waits to have approved, from its last events (a pending
    approval lives with the run, not in the session record)."""
    recent = await read_decoded(store, live.scope, live.session_id, live.last_seq - 20)
    for event in reversed(recent):
        if isinstance(event.event, ApprovalRequested):
            live.approval_elsewhere(event.event)
            return
