"""The bare baseline: a minimal Starlette WebSocket endpoint under the server's uvicorn options.

    python -m bench.baseline --port P

`GET /ws?frames=N&bytes=B`: on connect, and again on every message the client sends, it sends
N frames shaped like `agent_reason_delta` events of about B bytes each (the last one a
`response_complete`), each built as a dict and orjson-encoded, yielding after every send.
`frames=0` is an idle connection (the memory benchmark). It stores nothing and runs nothing:
what the agent server does on top of this is what the throughput ratio measures.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from server.cli import uvicorn_config
from server.runner import AgentServer
from server.settings import load_settings

__all__ = ["app", "main"]


async def stream(websocket: WebSocket) -> None:
    await websocket.accept()
    frames = int(websocket.query_params.get("frames", "200"))
    size = int(websocket.query_params.get("bytes", "200"))
    session_id, seq = uuid.uuid4().hex, 0
    delta = _padding(session_id, size)
    try:
        while True:
            if frames:
                run_id = uuid.uuid4().hex
                for i in range(frames):
                    seq += 1
                    frame = _frame(i == frames - 1, session_id, run_id, seq, delta)
                    await websocket.send_text(orjson.dumps(frame).decode())
                    await asyncio.sleep(0)
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
    except (WebSocketDisconnect, RuntimeError, OSError):
        return


def _frame(last: bool, session_id: str, run_id: str, seq: int, delta: str) -> dict[str, object]:
    ts = int(time.time() * 1000)
    if last:
        return {
            "type": "response_complete",
            "session_id": session_id,
            "run_id": run_id,
            "seq": seq,
            "ts": ts,
        }
    return {
        "type": "agent_update",
        "update_type": "agent_reason_delta",
        "session_id": session_id,
        "run_id": run_id,
        "seq": seq,
        "ts": ts,
        "step": 1,
        "delta": delta,
    }


def _padding(session_id: str, size: int) -> str:
    """The delta text that makes a frame about `size` bytes long."""
    bare = orjson.dumps(_frame(False, session_id, session_id, 1000, ""))
    return "x" * max(1, size - len(bare))


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


app = Starlette(routes=[WebSocketRoute("/ws", stream), Route("/healthz", healthz)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    settings = load_settings(None, {"server": {"port": args.port, "log_level": "warning"}})
    AgentServer(uvicorn_config(app, settings)).run()


if __name__ == "__main__":
    main()
