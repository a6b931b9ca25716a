"""The scripted fake LLM (tests/fakes/openai_server.py) in its own process, for benchmarks.

    python -m bench.fake_llm --port P

What it answers is a *profile*, set at run time over HTTP, globally or per session (the
server's `X-Agent-Session` header picks it):

    POST /_bench/default   {"kind": "steps" | "deltas" | "slow" | "paced" | "hang" | "call", ...}
    POST /_bench/session   {"session_id": "...", "profile": {...}}
    GET  /_bench/stats     time the fake itself spent per (run, step), and the prefix-cache
                           share of each call from step 2 on (profile "steps"), then reset
    GET  /_bench/ping      readiness

The fake's own time per request (from the request reaching the app to its last byte) is
recorded so that benchmarks can subtract it from what the agent server takes.

Prefix-cache share: with the "steps" profile, each request's prompt is rendered the way chat
templates order it (the tools, then the messages as sent) and kept per run. For every call
from step 2 on, the share is the longest common prefix with any earlier call of the same
run over the call's size: what a server-side prefix (KV) cache could reuse.
"""

from __future__ import annotations

import argparse
import contextvars
import time
from collections import defaultdict
from typing import Any

import orjson
import uvicorn

from tests.fakes.openai_server import FakeLLM, FakeToolCall, Reply, act, observe, reason

__all__ = ["build_app", "main"]

Profile = dict[str, Any]
_session: contextvars.ContextVar[str] = contextvars.ContextVar("session", default="")


def reply_for(profile: Profile, phase: str) -> Reply:
    """The scripted reply of `profile` for one phase (`X-Agent-Phase`)."""
    kind = profile.get("kind", "steps")
    delay = float(profile.get("delay_s", 0.0))
    if kind == "steps":  # one tool call per step, never finishing by itself
        if phase == "reason":
            return reason("I will check the time.")
        if phase == "act":
            return act(FakeToolCall("get_current_time", {"timezone": "UTC"}))
        if phase == "observe":
            return observe("Noted the time.")
        return Reply(chunks=["Done."])
    if kind == "call":  # one call of `tool` with `arguments`, then finish (bench/attacks.py)
        if phase == "act":
            return act(FakeToolCall(str(profile["tool"]), profile.get("arguments", {})))
        if phase == "observe":
            return observe("ok", final="done")
        if phase == "reason":
            return reason("I will call it.")
        return Reply(chunks=["Done."])
    if kind == "deltas":  # a Reason phase of many small deltas, then finish
        if phase == "reason":
            pieces = ["tok "] * int(profile.get("deltas", 200))
            block = orjson.dumps({"plan": "p", "tools_to_consider": [], "finish": False}).decode()
            return Reply(chunks=[*pieces, "\n```json\n", block, "\n```"], delay_s=delay)
        if phase == "observe":
            return observe("ok", final="done")
        return Reply()
    if kind == "slow":  # a long, slow Reason stream: stops land while it is in flight
        if phase == "reason":
            return Reply(chunks=["word "] * int(profile.get("chunks", 400)), delay_s=delay)
        if phase == "observe":
            return observe("ok", final="done")
        return Reply()
    if kind == "paced":  # ~`seconds` per call, streaming, for the concurrency benchmark
        chunks = int(profile.get("chunks", 10))
        pace = float(profile.get("seconds", 1.0)) / chunks
        if phase == "reason":
            block = orjson.dumps({"plan": "p", "tools_to_consider": [], "finish": False}).decode()
            return Reply(
                chunks=[*(["word "] * (chunks - 1)), f"\n```json\n{block}\n```"], delay_s=pace
            )
        if phase == "act":
            return Reply(chunks=[""] * chunks, delay_s=pace)  # empty text: no events, 1 s
        if phase == "observe":
            body = orjson.dumps(
                {"observation": "o", "should_continue": False, "final_answer": "done"}
            ).decode()
            return Reply(chunks=[*(["seen "] * (chunks - 1)), f"\n{body}"], delay_s=pace)
        return Reply(chunks=["Done."])
    if kind == "hang":  # one chunk, then nothing until the client goes away
        if phase == "reason":
            return Reply(chunks=["Thinking ", "more"], hang_after=1)
        return observe("ok", final="done")
    raise ValueError(f"unknown profile kind {kind!r}")


class BenchLLM:
    """FakeLLM behind a thin ASGI layer: profile selection, timing, control endpoints."""

    def __init__(self) -> None:
        self.default: Profile = {"kind": "steps"}
        self.sessions: dict[str, Profile] = {}
        self.fake = FakeLLM(default=self._reply, record=False)
        self.step_time: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.requests = 0
        self.busy_s = 0.0
        self.clients: set[tuple[str, int]] = set()  # source addresses = TCP connections used
        self.prompts: dict[str, list[bytes]] = defaultdict(list)  # per run, profile "steps"
        self.prefix_shares: list[float] = []

    def _reply(self, phase: str) -> Reply:
        profile = self.sessions.get(_session.get(), self.default)
        return reply_for(profile, phase)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.fake.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path.startswith("/_bench/"):
            await self._control(scope, receive, send)
            return
        headers = dict(scope["headers"])
        _session.set(headers.get(b"x-agent-session", b"").decode())
        run = headers.get(b"x-agent-run", b"").decode()
        step = int(headers.get(b"x-agent-step", b"0") or 0)
        started = time.perf_counter()

        async def timed_send(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                spent = time.perf_counter() - started
                self.busy_s += spent
                if run:
                    self.step_time[run][step] += spent

        self.requests += 1
        if scope.get("client"):
            self.clients.add(tuple(scope["client"]))
        profile = self.sessions.get(_session.get(), self.default)
        if run and profile.get("kind", "steps") == "steps":
            receive = self._recording(receive, run, step)
        await self.fake.app(scope, receive, timed_send)

    def _recording(self, receive: Any, run: str, step: int) -> Any:
        """`receive`, which also records the request's prompt once its body is complete."""
        parts: list[bytes] = []

        async def recording_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                parts.append(message.get("body", b""))
                if not message.get("more_body"):
                    self._record_prompt(run, step, b"".join(parts))
            return message

        return recording_receive

    def _record_prompt(self, run: str, step: int, body: bytes) -> None:
        data = orjson.loads(body)
        # As chat templates render it (and OpenAI caches it): the tools first, then the
        # messages in order, each as the server sent it (role before content).
        prompt = orjson.dumps(data.get("tools", [])) + orjson.dumps(data.get("messages", []))
        earlier = self.prompts[run]
        if step >= 2 and earlier and prompt:
            shared = max(common_prefix(prompt, e) for e in earlier)
            self.prefix_shares.append(shared / len(prompt))
        earlier.append(prompt)

    async def _control(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        answer: Any = {"ok": True}
        if path == "/_bench/default":
            self.default = orjson.loads(body)
            self.sessions.clear()
        elif path == "/_bench/session":
            data = orjson.loads(body)
            self.sessions[data["session_id"]] = data["profile"]
        elif path == "/_bench/stats":
            answer = {
                "requests": self.requests,
                "connections": len(self.clients),
                "busy_s": self.busy_s,
                "disconnects": self.fake.disconnects,
                "step_time": self.step_time,
                "prefix_shares": self.prefix_shares,
            }
            self.prompts, self.prefix_shares = defaultdict(list), []
            self.step_time = defaultdict(lambda: defaultdict(float))
            self.requests, self.busy_s = 0, 0.0
            self.clients = set()
        payload = orjson.dumps(answer, option=orjson.OPT_NON_STR_KEYS)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of `a` and `b` (binary search over C compares)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def build_app() -> BenchLLM:
    return BenchLLM()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        build_app(),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        lifespan="off",
        access_log=False,
        backlog=4096,
        timeout_keep_alive=30,
    )


if __name__ == "__main__":
    main()
