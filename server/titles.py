"""Session titles: the first words of the first message at once, then, after the session's
first answer, a short title the model writes (`agent.session_titles`), unless the user renamed
the session meanwhile. Watchers learn it from a `session_title` frame (docs/wire-protocol.md).
"""

from __future__ import annotations

import asyncio
import logging

from agent.errors import ModelError, StorageError
from agent.ports import CallInfo, ChatModel
from agent.titles import write_title
from server.events import Event, TitleChanged
from server.live import LiveSession
from server.storage.base import SessionStore
from server.storage.search import ANSWER_PHASES

__all__ = ["SessionTitles", "first_words"]

log = logging.getLogger(__name__)

FIRST_WORDS_CHARS = 80
TITLE_TIMEOUT_S = 60.0  # a slow local model: the first words stay meanwhile


def first_words(content: str) -> str:
    """The title a session gets with its first message."""
    return " ".join(content.split())[:FIRST_WORDS_CHARS]


class SessionTitles:
    """Name sessions by the model, each in a task of its own, after the first answer."""

    def __init__(self, store: SessionStore, model: ChatModel) -> None:
        self._store = store
        self._model = model
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def after_first_run(self, live: LiveSession, run_id: str) -> None:
        """The session's first run ended with an answer: name it, in the background."""
        if self._closed:  # shutting down
            return
        task = asyncio.create_task(self._name(live, run_id), name=f"title-{live.session_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Cancel the titles still being written, and start no more (shutdown)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _name(self, live: LiveSession, run_id: str) -> None:
        scope, session_id = live.scope, live.session_id
        try:
            history = await self._store.load_history(scope, session_id)
            question = next((m.content for m in history if m.role == "user"), "")
            answers = [m for m in history if m.role == "assistant" and m.phase in ANSWER_PHASES]
            if not question or not answers:
                return
            call = CallInfo(session_id, run_id, 0, "title")
            async with asyncio.timeout(TITLE_TIMEOUT_S):
                title = await write_title(self._model, question, answers[-1].content, call)
            session = await self._store.get_session(scope, session_id)
            # the user's own name for it wins, also one given while the model wrote
            if title is None or session is None or session.title != first_words(question):
                return
            if not await self._store.rename_session(scope, session_id, title):
                return
        except (ModelError, StorageError, TimeoutError) as exc:
            log.info("session %s keeps its first words as its title: %s", session_id, exc)
            return
        live.notify(Event(TitleChanged(title), session_id))
