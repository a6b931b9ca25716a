"""A scripted stand-in for the server's /ws, inside the browser (Playwright routes the page's
WebSocket here). The page and its HTTP calls still come from the real server.

Browser tests use it to send the exact frames a state needs, including the planned protocol
additions (`agent_user_message`, `agent_llm_retry`, `agent_answer_delta`, `agent_user_answer`,
the session frame's `model` and `defaults`) before the server sends them.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

Frame = dict[str, Any]


class PageSocket:
    """Every WebSocket the page opens to /ws lands here; `emit` sends to all open ones."""

    def __init__(self, session_id: str = "s-fake", **session: Any) -> None:
        self.session_id = session_id
        self.session: Frame = {"status": "idle", "pending_input": None, **session}
        self.accepting = True  # False: new sockets are closed at once, as with a dead server
        self.sent: list[Frame] = []  # frames the page sent, in order
        self.urls: list[str] = []
        self.seq = 0
        self.run_id = "run-0"
        self.clock = int(time.time() * 1000)
        self._open: list[Any] = []
        self._changed = asyncio.Condition()

    async def install(self, page: Any) -> PageSocket:
        await page.route_web_socket(re.compile(r"/ws(\?.*)?$"), self._connect)
        return self

    def _connect(self, ws: Any) -> None:
        self.urls.append(ws.url)
        if not self.accepting:
            asyncio.ensure_future(ws.close(code=1011))
            return
        self._open.append(ws)
        ws.on_message(self._received)
        ws.on_close(lambda code, reason: self._closed(ws))
        ws.send(
            json.dumps(
                {
                    "type": "session",
                    "session_id": self.session_id,
                    "resumed": len(self.urls) > 1,
                    "last_seq": self.seq,
                    **self.session,
                }
            )
        )

    def _closed(self, ws: Any) -> None:
        if ws in self._open:
            self._open.remove(ws)

    def _received(self, message: str | bytes) -> None:
        self.sent.append(json.loads(message))

        async def notify() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.ensure_future(notify())

    async def wait_sent(self, test: Callable[[Frame], bool], timeout: float = 10.0) -> Frame:
        """Wait until the page has sent a frame that passes `test`; return it."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: any(test(f) for f in self.sent))
        return next(f for f in self.sent if test(f))

    def new_run(self) -> str:
        self.run_id = f"run-{self.seq + 1}"
        return self.run_id

    def emit(self, kind: str, *, after_ms: int = 100, **fields: Any) -> Frame:
        """Send one run event (an `agent_update` when `kind` starts with "agent_") to every
        open socket, with the next seq and a clock `after_ms` later than the last event."""
        self.seq += 1
        self.clock += after_ms
        frame: Frame = (
            {"type": "agent_update", "update_type": kind}
            if kind.startswith("agent_")
            else {"type": kind}
        )
        frame |= {
            "session_id": self.session_id,
            "run_id": self.run_id,
            "seq": self.seq,
            "ts": self.clock,
            **fields,
        }
        self.send(frame)
        return frame

    def send(self, frame: Frame) -> None:
        """Send a frame as is (a client error has no run_id and no seq)."""
        for ws in self._open:
            ws.send(json.dumps(frame))

    async def drop(self) -> None:
        """Close every open socket, as a dying server does."""
        for ws in list(self._open):
            await ws.close(code=1011)
        self._open.clear()
