"""Our loop: the real server (`python -m server`, the shipped config.toml) over a WebSocket.

The config is the shipped one with the eval's tools enabled (memory, web_fetch allowed to reach
the page server, bench/eval/eval_tools.py) and the model server's URL and name: nothing per
task or per model.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from bench.eval.record import Record
from bench.eval.tasks import Loop, Outcome, Task
from bench.procs import ROOT, Proc, _spawn, free_port

__all__ = ["OurLoop"]

RUN_TIMEOUT_S = 900.0  # a whole run; past it the run is stopped and counted as not done


def eval_config(workdir: Path, page_port: int) -> Path:
    """The shipped config.toml with the eval's tools: the same for every task and model."""
    text = (ROOT / "config.toml").read_text()
    text = re.sub(
        r'^enabled = \["get_current_time", "web_fetch"\]$',
        'enabled = ["get_current_time", "web_fetch", "memory_save", "memory_retrieve"]\n'
        'modules = ["bench.eval.eval_tools"]',
        text,
        count=1,
        flags=re.M,
    )
    text = re.sub(
        r"^allow_hosts = \[\]",
        f'allow_hosts = ["127.0.0.1:{page_port}"]',
        text,
        count=1,
        flags=re.M,
    )
    if "bench.eval.eval_tools" not in text or str(page_port) not in text:
        raise RuntimeError("config.toml changed shape: update bench/eval/ours.py")
    path = workdir / "config.toml"
    path.write_text(text)
    return path


class OurLoop(Loop):
    name = "agent-server"

    def __init__(self, workdir: Path, base_url: str, model: str, page_port: int) -> None:
        super().__init__(workdir, base_url, model, page_port)
        self._proc: Proc | None = None

    def start(self) -> None:
        port = free_port()
        config = eval_config(self._workdir, self._page_port)
        env = {
            "OPENAI_BASE_URL": self._base_url,
            "OPENAI_API_KEY": "unused",
            "AGENT__LLM__MODEL": self._model,
            "AGENT__STORAGE__SQLITE_PATH": str(self._workdir / "agent.db"),
            "AGENT__SERVER__LOG_LEVEL": "warning",
        }
        args = ["-m", "server", "--config", str(config), "--port", str(port)]
        popen = _spawn("agent", args, self._workdir, env)
        self._proc = Proc("agent", popen, port, self._workdir / "agent.log")
        self._proc.wait_ready(timeout=120)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()

    async def _turn(self, content: str, task: Task, answers: list[str], record: Record) -> Outcome:
        assert self._proc is not None
        outcome = Outcome(started=time.time())
        url = f"ws://127.0.0.1:{self._proc.port}/ws"
        chat: dict[str, Any] = {"type": "chat", "content": content, "agent_mode": True}
        if task.max_steps is not None:
            chat["agent_max_steps"] = task.max_steps
        async with connect(url, max_size=None, open_timeout=30) as ws:
            json.loads(await ws.recv())
            sent = time.time()
            await ws.send(json.dumps(chat))
            try:
                async with asyncio.timeout(RUN_TIMEOUT_S):
                    await self._read(ws, outcome, answers, record, sent)
            except TimeoutError:
                outcome.error = f"no end within {RUN_TIMEOUT_S:g} s"
                await ws.send(json.dumps({"type": "agent_control", "action": "stop"}))
        outcome.ended = time.time()
        return outcome

    async def _read(
        self, ws: Any, outcome: Outcome, answers: list[str], record: Record, sent: float
    ) -> None:
        calls: dict[str, dict[str, Any]] = {}
        async for raw in ws:
            frame = json.loads(raw)
            kind = frame.get("update_type") or frame["type"]
            record.event(frame, sent)
            if kind == "agent_request_input":
                reply = answers.pop(0) if answers else "I don't know, do what you can."
                await ws.send(json.dumps({"type": "agent_user_input", "content": reply}))
            elif kind == "tool_start":
                calls[frame["tool_call_id"]] = {
                    "name": frame["tool_name"],
                    "arguments": frame["arguments"],
                    "ok": False,
                }
                outcome.calls.append(calls[frame["tool_call_id"]])
            elif kind in ("tool_complete", "tool_error") and frame["tool_call_id"] in calls:
                call = calls[frame["tool_call_id"]]
                call["ok"] = kind == "tool_complete"
                call["result"] = frame.get("result", frame.get("error"))
            elif kind == "agent_completion":
                outcome.answer = frame["final_answer"]
                outcome.stop_reason = frame["stop_reason"]
                outcome.done = True
                record.usage(frame.get("usage") or {}, frame.get("steps", 0))
            elif kind == "agent_stopped":
                outcome.stop_reason = frame["reason"]
                record.usage(frame.get("usage") or {}, frame.get("step", 0))
            elif kind == "error":
                outcome.error = f"{frame.get('code')}: {frame.get('message')}"
            elif kind == "response_complete":
                return
