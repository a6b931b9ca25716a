"""RunControl: the handle a transport uses to steer one running run.

Stop is cancellation: `request_stop` records why and cancels the run's task, so whatever the
run awaits at that moment (an LLM stream, a tool, a pending question) is interrupted at once.
The run catches that cancellation, sees `stop_reason`, and records the stopped state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agent.events import StopReason

__all__ = ["PendingQuestion", "RunControl"]


@dataclass(frozen=True, slots=True)
class PendingQuestion:
    """A `request_input` question waiting for the user's answer."""

    question: str
    tool_call_id: str
    step: int
    expires_at: int  # epoch milliseconds


class RunControl:
    """Stop flag, input queue and pending question of one run."""

    def __init__(self) -> None:
        self.stop_requested = asyncio.Event()
        self.stop_reason: StopReason | None = None
        self.pending: PendingQuestion | None = None
        self._answers: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        self._task: asyncio.Task[object] | None = None

    def attach(self, task: asyncio.Task[object]) -> None:
        """Bind the task that `request_stop` cancels."""
        self._task = task

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

    async def ask(self, question: PendingQuestion, timeout_s: float) -> str | None:
        """Publish `question` and wait for its answer; None when the timeout passes first."""
        while not self._answers.empty():  # an answer to an earlier question must not leak
            self._answers.get_nowait()
        self.pending = question
        try:
            async with asyncio.timeout(timeout_s):
                return await self._answers.get()
        except TimeoutError:
            return None
        finally:
            self.pending = None
