"""RunControls: a client's stop, answer and approval decision, for a run here or elsewhere.

A run working in this process is acted on through its RunControl; a run another process
owns (shared store) gets the control through the store (`server/remote.py`).
"""

from __future__ import annotations

from agent.control import Decision, DecisionError
from server import remote
from server.live import LiveSession
from server.storage.base import SessionStatus, Store

__all__ = ["RunControls"]


class RunControls:
    """Deliver stops, answers and decisions to the session's run, wherever it works."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def stop(self, live: LiveSession) -> None:
        """Stop the session's run, here or (shared store) in the process that owns it."""
        if live.run is None:
            await remote.stop_elsewhere(self._store, live)
            return
        live.run.control.request_stop("user")

    async def answer(self, live: LiveSession, content: str, tool_call_id: str | None) -> None:
        """Answer the pending question, here or in the process that runs it; of two answers
        to one question, from any processes, exactly one is accepted. With `tool_call_id`,
        only the question of that call: an answer meant for an earlier one is refused."""
        run = live.run
        if run is None:
            await remote.answer_elsewhere(self._store, live, content, tool_call_id)
            return
        question = run.control.pending
        if question is None:
            raise remote.not_awaiting_input()
        remote.check_question(question.tool_call_id, tool_call_id)
        payload = {"content": content}
        key = f"answer:{question.tool_call_id}"
        if not await remote.claim(self._store, live, run, key, "answer", payload):
            raise remote.not_awaiting_input()
        if not run.control.answer(content):
            raise remote.not_awaiting_input()
        await live.publish([], status=SessionStatus.RUNNING, run_id=run.run_id)

    async def decide(
        self, live: LiveSession, tool_call_id: str, approve: bool, reason: str | None
    ) -> None:
        """Approve or deny the call waiting for approval; ProtocolError says what is wrong."""
        run = live.run
        payload = {"tool_call_id": tool_call_id, "approve": approve, "reason": reason or ""}
        if run is None:
            await remote.decide_elsewhere(self._store, live, payload)
            return
        if self._store.shared:
            remote.check_decision(run, tool_call_id)
            key = f"decision:{tool_call_id}"
            if not await remote.claim(self._store, live, run, key, "decision", payload):
                raise remote.already_decided(tool_call_id)
        try:
            run.control.decide(tool_call_id, Decision(approve, reason or ""))
        except DecisionError as exc:
            raise remote.refused(exc) from None
        await live.publish([], status=SessionStatus.RUNNING, run_id=run.run_id)
