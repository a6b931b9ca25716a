"""A protocol client over the real `websockets` library, with waits that time out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect

Frame = dict[str, Any]


def kind(frame: Frame) -> str:
    """`agent_update` frames by their update_type, everything else by type."""
    return str(frame.get("update_type") or frame["type"])


class Client:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seen: list[Frame] = []

    @classmethod
    async def connect(
        cls, address: str, headers: dict[str, str] | None = None, **params: Any
    ) -> Client:
        query = urlencode({k: v for k, v in params.items() if v is not None})
        url = f"ws://{address}/ws" + (f"?{query}" if query else "")
        ws = await connect(url, additional_headers=headers, max_size=None, open_timeout=5)
        return cls(ws)

    async def send(self, frame: Frame | str) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self, timeout: float = 5.0) -> Frame:
        raw = await asyncio.wait_for(self.ws.recv(), timeout)
        frame: Frame = json.loads(raw)
        self.seen.append(frame)
        return frame

    async def until(
        self, match: str | Callable[[Frame], bool], timeout: float = 5.0
    ) -> list[Frame]:
        """Receive frames up to and including the first that matches; return them all."""
        test = (lambda f: kind(f) == match) if isinstance(match, str) else match
        out: list[Frame] = []
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.recv(timeout)
                out.append(frame)
                if test(frame):
                    return out

    async def run(
        self, content: str = "hello", timeout: float = 10.0, **fields: Any
    ) -> list[Frame]:
        """Send a chat and return every frame up to its response_complete."""
        await self.send({"type": "chat", "content": content, **fields})
        return await self.until("response_complete", timeout)

    async def close(self) -> None:
        await self.ws.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
