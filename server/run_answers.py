"""Answers given ahead: answers a client sent for questions its run has not asked yet.

An AG-UI client sends the results of all the frontend tool calls of a step at once, while the
run asks for them one by one. `AnswersToCome` holds the rest: a session subscriber of its
own that answers each question as the run asks it. It outlives the request (a client may
close the response once it has sent them) and ends with the run, or once every answer is
given.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from agent.errors import StorageError
from agent.events import InputRequested
from server.events import Event, RunEnded
from server.live import LiveSession
from server.protocol import ProtocolError

__all__ = ["AnswersToCome"]

log = logging.getLogger(__name__)

Answer = Callable[[LiveSession, str, str], Awaitable[None]]


class AnswersToCome:
    """Answer the questions of run `run_id` named in `answers` (by their `tool_call_id`)
    as it asks them, with `answer`; `release` lets go of the session at the end."""

    def __init__(
        self,
        live: LiveSession,
        run_id: str,
        answers: dict[str, str],
        answer: Answer,
        release: Callable[[LiveSession], None],
    ) -> None:
        self._live, self._run_id, self._answers = live, run_id, answers
        self._answer_with, self._release = answer, release
        self._answering: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        live.subscribe(self)

    def deliver(self, text: str, seq: int | None, event: Event) -> None:
        if event.run_id != self._run_id:
            return
        if isinstance(event.event, RunEnded):
            self.finish(0)
            return
        if not isinstance(event.event, InputRequested):
            return
        call_id = event.event.call_id
        if call_id in self._answers:
            task = asyncio.create_task(self._answer(call_id, self._answers.pop(call_id)))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
            if not self._answers:
                self.finish(0)

    async def _answer(self, call_id: str, content: str) -> None:
        try:
            await self._answer_with(self._live, content, call_id)
        except (ProtocolError, StorageError) as exc:  # answered from elsewhere, or ended
            log.info("the answer given ahead for %s was not taken: %s", call_id, exc)

    def finish(self, code: int) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._live.unsubscribe(self)
        self._release(self._live)

    async def wait_closed(self) -> None:
        await self._closed.wait()
