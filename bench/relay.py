"""The bare relay: a run's LLM calls and frames with nothing of the agent around them.

    python -m bench.relay --port P --llm HOST:PORT

`GET /ws` sends a `session` frame on connect. Each `chat` then makes the two streamed requests
of a one-step run of the fake LLM's "deltas" profile (phases `reason` and `observe`, as the
agent sends them), forwards the text of every read of the stream as one `*_delta` frame (what
one read brings, as the agent coalesces it) and ends with `response_complete`; a stop cancels
the stream in flight. It uses the agent's stack (uvicorn options, Starlette, aiohttp, orjson)
and nothing else: no control-block parsing, no store, no conversation, no sequence numbers to
keep. What one delta event or one run costs here is a floor under benchmarks 2 and 2b: the
least any server written this way can spend on reading a model's stream and relaying it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid

import aiohttp
import orjson
from starlette.applications import Starlette
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from bench.baseline import healthz
from server.cli import uvicorn_config
from server.runner import AgentServer
from server.settings import load_settings

__all__ = ["main"]

_PHASES = (("reason", "agent_reason_delta"), ("observe", "agent_observe_delta"))


class Relay:
    """One aiohttp session for every call, as the agent has (made on the first call: aiohttp
    wants a running loop)."""

    def __init__(self, llm: str) -> None:
        self.url = f"http://{llm}/v1/chat/completions"
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1000))
        return self._session

    async def run(self, websocket: WebSocket, session_id: str, run_id: str, content: str) -> None:
        """Both phases of one run, each read forwarded as it arrives, then its end."""
        body = orjson.dumps(
            {
                "model": "gpt-4o-mini",
                "stream": True,
                "messages": [{"role": "user", "content": content}],
            }
        )
        for phase, update_type in _PHASES:
            headers = {
                "Content-Type": "application/json",
                "X-Agent-Session": session_id,
                "X-Agent-Run": run_id,
                "X-Agent-Step": "1",
                "X-Agent-Phase": phase,
            }
            async with self.session().post(self.url, data=body, headers=headers) as reply:
                rest = b""
                while data := await reply.content.readany():
                    lines = (rest + data).split(b"\n")
                    rest = lines.pop()
                    text = "".join(_texts(lines))
                    if text:
                        frame = _delta(update_type, session_id, run_id, text)
                        await websocket.send_text(orjson.dumps(frame).decode())
        await _complete(websocket, session_id, run_id)


async def _complete(websocket: WebSocket, session_id: str, run_id: str) -> None:
    done = {"type": "response_complete", "session_id": session_id, "run_id": run_id}
    with contextlib.suppress(RuntimeError, OSError):
        await websocket.send_text(orjson.dumps(done).decode())


def _texts(lines: list[bytes]) -> list[str]:
    """The content of each chunk among server-sent `lines`."""
    out = []
    for line in lines:
        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
            for choice in orjson.loads(line[5:]).get("choices") or ():
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    out.append(piece)
    return out


def _delta(update_type: str, session_id: str, run_id: str, text: str) -> dict[str, object]:
    return {
        "type": "agent_update",
        "update_type": update_type,
        "session_id": session_id,
        "run_id": run_id,
        "ts": int(time.time() * 1000),
        "step": 1,
        "delta": text,
    }


def build_app(relay: Relay) -> Starlette:
    async def stream(websocket: WebSocket) -> None:
        await websocket.accept()
        session_id = uuid.uuid4().hex
        await websocket.send_text(orjson.dumps({"type": "session", "id": session_id}).decode())
        running: asyncio.Task[None] | None = None
        run_id = ""
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                frame = orjson.loads(message.get("text") or message.get("bytes") or b"{}")
                if frame.get("type") == "chat" and (running is None or running.done()):
                    run_id, content = uuid.uuid4().hex, str(frame.get("content", ""))
                    running = asyncio.create_task(relay.run(websocket, session_id, run_id, content))
                elif frame.get("type") == "agent_control" and running and not running.done():
                    # a task cancelled before its first step runs none of its code, so the
                    # run's end is sent from here
                    running.cancel()
                    await asyncio.gather(running, return_exceptions=True)
                    await _complete(websocket, session_id, run_id)
        except (WebSocketDisconnect, RuntimeError, OSError):
            return
        finally:
            if running is not None:
                running.cancel()

    return Starlette(routes=[WebSocketRoute("/ws", stream), Route("/healthz", healthz)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--llm", required=True, help="the fake LLM's HOST:PORT")
    args = parser.parse_args()
    settings = load_settings(None, {"server": {"port": args.port, "log_level": "warning"}})
    AgentServer(uvicorn_config(build_app(Relay(args.llm)), settings)).run()


if __name__ == "__main__":
    main()
