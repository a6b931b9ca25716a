"""RunControl: the handle a transport uses to steer one running run.

Stop is cancellation: `request_stop` records why and cancels the run's task, so whatever the
run awaits at that moment (an LLM stream, a tool, a pending question) is interrupted at once.
The run catches that cancellation, sees `stop_reason`, and records the stopped state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agent.events import StopReason
from agent.validation import quoted

__all__ = [
    "Decision",
    "DecisionError",
    "PendingApproval",
    "PendingQuestion",
    "RunControl",
    "already_decided",
    "not_the_pending_call",
]


@dataclass(frozen=True, slots=True)
class PendingQuestion:
    """A `request_input` question waiting for the user's answer."""

    question: str
    tool_call_id: str
    step: int
    expires_at: int  # epoch milliseconds


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call waiting for the user's approval before it runs."""

    tool_name: str
    arguments: dict[str, Any]
    tool_call_id: str
    step: int
    expires_at: int  # epoch milliseconds


@dataclass(frozen=True, slots=True)
class Decision:
    approve: bool
    reason: str = ""


class DecisionError(Exception):
    """A decision that cannot be taken; `code` says why (a protocol error code)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def already_decided(tool_call_id: str) -> DecisionError:
    return DecisionError(
        "already_decided", f"The call {quoted(tool_call_id)} was already approved or denied."
    )


def not_the_pending_call(pending: str, got: str) -> DecisionError:
    return DecisionError(
        "unknown_tool_call",
        f"tool_call_id: the call waiting for approval is {pending!r} (got {quoted(got)}).",
    )


class RunControl:
    """Stop flag, input queue and pending question of one run."""

    def __init__(self) -> None:
        self.stop_requested = asyncio.Event()
        self.stop_reason: StopReason | None = None
        self.pending: PendingQuestion | None = None
        self.asking = asyncio.Lock()  # held while a question is open: one at a time
        self._answers: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        self._task: asyncio.Task[object] | None = None
        self.pending_approval: PendingApproval | None = None
        self._decision: asyncio.Future[Decision] | None = None
        self._decided: set[str] = set()  # calls of this run already approved or denied

    def attach(self, task: asyncio.Task[object]) -> None:
        """Bind the task that `request_stop` cancels. Call it from inside the task, once it
        runs: a task cancelled before its first step never enters its own handlers, so a stop
        that came first only cancels it here, to land at its first wait."""
        self._task = task
        if self.stop_reason is not None and not task.done():
            task.cancel()

    def detach(self) -> None:
        """The run is over: later stop requests must not cancel whatever the task does next."""
        self._task = None

    def request_stop(self, reason: StopReason) -> bool:
        """Stop the run; return False when a stop is already under way."""
        if self.stop_reason is not None:
            return False
        self.stop_reason = reason
        self.stop_requested.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        return True

    def abandon(self) -> None:
        """End the run without a stop: nothing of it is recorded (another process has closed
        it), so the cancellation carries no stop reason and passes `stop_recorded` untouched."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def claim_stop(self, reason: StopReason) -> None:
        """Mark the run as stopping without cancelling it: the run is ending itself."""
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stop_requested.set()

    def answer(self, content: str) -> bool:
        """Deliver the answer to the pending question; False when none is pending."""
        if self.pending is None or self._answers.full():
            return False
        self.pending = None
        self._answers.put_nowait(content)
        return True

    def pose(self, question: PendingQuestion) -> None:
        """Make `question` the open one, answerable from now on: before it is announced, so
        an answer that comes the moment the announcement is out is taken (`await_answer`)."""
        while not self._answers.empty():  # an answer to an earlier question must not leak
            self._answers.get_nowait()
        self.pending = question

    def withdraw(self) -> None:
        """The question posed could not be announced: nothing waits for an answer."""
        self.pending = None

    async def await_answer(self, timeout_s: float) -> str | None:
        """Wait for the answer to the question `pose` opened; None when the timeout passes
        first."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self._answers.get()
        except TimeoutError:
            return None
        finally:
            self.withdraw()

    def decide(self, tool_call_id: str, decision: Decision) -> None:
        """Deliver the decision on the pending approval; raise DecisionError when it cannot
        be taken (nothing pending, another call pending, this call already decided)."""
        pending = self.pending_approval
        if tool_call_id in self._decided:
            raise already_decided(tool_call_id)
        if pending is None or self._decision is None or self._decision.done():
            raise DecisionError("not_awaiting_approval", "No tool call is waiting for approval.")
        if pending.tool_call_id != tool_call_id:
            raise not_the_pending_call(pending.tool_call_id, tool_call_id)
        self._decided.add(tool_call_id)
        self.pending_approval = None
        self._decision.set_result(decision)

    def pose_approval(self, pending: PendingApproval) -> None:
        """Make `pending` the call waiting for a decision, before it is announced: a decision
        that comes the moment the announcement is out is taken (`await_decision`)."""
        self._decision = asyncio.get_running_loop().create_future()
        self.pending_approval = pending

    def withdraw_approval(self) -> None:
        """The approval posed could not be announced: nothing waits for a decision."""
        self.pending_approval = None
        self._decision = None

    async def await_decision(self, timeout_s: float) -> Decision | None:
        """Wait for the decision on the call `pose_approval` set out; None when the timeout
        passes first."""
        decision = self._decision
        assert decision is not None, "pose_approval first"
        try:
            async with asyncio.timeout(timeout_s):
                return await decision
        except TimeoutError:
            return None
        finally:
            self.withdraw_approval()
