"""A scripted OpenAI-compatible chat-completions server, served over real HTTP on loopback.

Replies are scripted per phase (the `X-Agent-Phase` header) and consumed in order; a phase
with nothing scripted gets a sensible default, so a test scripts only what it is about.
Every request is recorded (headers and body), and tests can wait for one to arrive.

Like llama.cpp's server with a strict chat template, it refuses (HTTP 400) a conversation in
which a system message is not first, two messages of one role follow each other, a tool result
does not answer a call of the assistant message before it, or the last message is the
assistant's (a prefill): a request shape that only lenient servers accept fails here at once.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
import time
import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class FakeToolCall:
    name: str
    arguments: Any  # a dict (sent as JSON) or a raw string (sent as is)
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")

    def raw_arguments(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Reply:
    """One scripted reply. `chunks` stream as content deltas, then tool calls, then usage."""

    chunks: list[str] = field(default_factory=list)
    tool_calls: list[FakeToolCall] = field(default_factory=list)
    delay_s: float = 0.0  # before each chunk
    status: int | None = None  # answer with this HTTP error instead
    error: dict[str, Any] | None = None  # the error object sent with `status`
    headers: dict[str, str] = field(default_factory=dict)  # sent with `status` (Retry-After)
    hang_after: int | None = None  # stop sending after this many chunks, until disconnected
    drop_after: int | None = None  # break the stream after this many chunks
    raw: bytes | None = None  # send these bytes as the whole response body instead
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached_tokens: int | None = None  # reported as usage.prompt_tokens_details.cached_tokens
    reasoning: list[str] = field(default_factory=list)  # `reasoning_content` deltas first


def text(*chunks: str, **kw: Any) -> Reply:
    return Reply(chunks=list(chunks), **kw)


def unrepeated(chars: int, seed: int) -> str:
    """`chars` letters that never go round in circles (agent/repetition.py would close a reply
    of "x" * n): a long reply that must be read to its end."""
    return "".join(random.Random(seed).choices(string.ascii_letters + " ", k=chars))


def reason(sentence: str = "I will look into it.", *, finish: bool = False, **kw: Any) -> Reply:
    block = json.dumps({"plan": sentence, "tools_to_consider": [], "finish": finish})
    return Reply(chunks=[sentence, "\n```json\n", block, "\n```"], **kw)


def observe(sentence: str = "That worked.", *, final: str | None = None, **kw: Any) -> Reply:
    block = json.dumps(
        {"observation": sentence, "should_continue": final is None, "final_answer": final or ""}
    )
    return Reply(chunks=[sentence, "\n", block], **kw)


def act(*calls: FakeToolCall, **kw: Any) -> Reply:
    return Reply(tool_calls=list(calls), **kw)


@dataclass
class Recorded:
    phase: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeLLM:
    """The scripted server's state; `app` is its ASGI app."""

    def __init__(
        self, default: Callable[[str], Reply] | None = None, *, record: bool = True
    ) -> None:
        self.default = default or _default
        self.record = record  # off for long soaks, so the fake's own memory stays flat
        self.scripts: dict[str, deque[Reply | Callable[[dict[str, Any]], Reply]]] = defaultdict(
            deque
        )
        self.requests: list[Recorded] = []
        self.refusals: list[str] = []  # why requests were refused as a strict server would
        self.disconnects = 0
        self._disconnected = asyncio.Condition()
        self._arrived = asyncio.Condition()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._handle, methods=["POST"])])

    def script(self, phase: str, *replies: Reply | Callable[[dict[str, Any]], Reply]) -> None:
        """Queue replies for a phase; a callable gets the request body and returns the reply
        (to answer from what the request contains, e.g. a tool result)."""
        self.scripts[phase].extend(replies)

    def phases(self) -> list[str]:
        return [r.phase for r in self.requests]

    async def wait_for(self, phase: str, count: int = 1, timeout: float = 5.0) -> Recorded:
        """Wait until `count` requests of `phase` have arrived; return the last of them."""

        async def ready() -> None:
            async with self._arrived:
                await self._arrived.wait_for(
                    lambda: sum(r.phase == phase for r in self.requests) >= count
                )

        await asyncio.wait_for(ready(), timeout)
        return [r for r in self.requests if r.phase == phase][count - 1]

    async def wait_disconnects(self, count: int, timeout: float = 5.0) -> None:
        """Wait until `count` streams were aborted by the client (e.g. by a stop)."""
        async with asyncio.timeout(timeout), self._disconnected:
            await self._disconnected.wait_for(lambda: self.disconnects >= count)

    async def _handle(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ClientDisconnect:  # the server stopped the run while sending the request
            return Response(status_code=499)
        phase = request.headers.get("x-agent-phase", "")
        if self.record:
            async with self._arrived:
                self.requests.append(Recorded(phase, dict(request.headers), body))
                self._arrived.notify_all()
        refusal = conversation_problem(body.get("messages"))
        if refusal is not None:
            self.refusals.append(refusal)
            return JSONResponse(
                {"error": {"code": 400, "message": refusal, "type": "invalid_request_error"}},
                status_code=400,
            )
        queue = self.scripts.get(phase)
        scripted = queue.popleft() if queue else self.default(phase)
        reply = scripted(body) if callable(scripted) else scripted
        if reply.status is not None:
            error = reply.error or {"message": f"scripted {reply.status}", "type": "server_error"}
            return JSONResponse({"error": error}, status_code=reply.status, headers=reply.headers)
        if reply.raw is not None:
            return Response(reply.raw, media_type="text/event-stream")
        return StreamingResponse(self._stream(reply, body), media_type="text/event-stream")

    async def _stream(self, reply: Reply, body: dict[str, Any]) -> AsyncIterator[bytes]:
        ident = f"chatcmpl-{uuid.uuid4().hex[:8]}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
            payload: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.get("model", "fake"),
                "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if usage:
                payload["usage"] = usage
            return f"data: {json.dumps(payload)}\n\n".encode()

        try:
            yield chunk({"role": "assistant", "content": ""})
            for thought in reply.reasoning:
                yield chunk({"reasoning_content": thought})
            for i, piece in enumerate(reply.chunks):
                if reply.hang_after is not None and i >= reply.hang_after:
                    await asyncio.Event().wait()
                if reply.drop_after is not None and i >= reply.drop_after:
                    raise ConnectionResetError("scripted drop")
                if reply.delay_s:
                    await asyncio.sleep(reply.delay_s)
                yield chunk({"content": piece})
            if reply.hang_after is not None and reply.hang_after >= len(reply.chunks):
                await asyncio.Event().wait()
            for index, call in enumerate(reply.tool_calls):
                yield chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": ""},
                            }
                        ]
                    }
                )
                raw = call.raw_arguments()
                half = len(raw) // 2
                for part in (raw[:half], raw[half:]):
                    yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            finish = "tool_calls" if reply.tool_calls else "stop"
            yield chunk({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                usage: dict[str, Any] = {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                }
                if reply.cached_tokens is not None:
                    usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
                yield chunk({}, usage=usage)
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.disconnects += 1
            async with self._disconnected:
                self._disconnected.notify_all()
            raise


def conversation_problem(messages: Any) -> str | None:
    """Why a strict chat template (llama.cpp `--jinja`, vLLM, Anthropic gateways) refuses
    `messages`, or None when it is accepted."""
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    roles = [m.get("role") for m in messages]
    if "system" in roles[1:]:
        return "System message must be at the beginning."
    open_calls: set[str] = set()
    previous = None
    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                return f"Tool result {call_id!r} does not follow its call."
            open_calls.discard(call_id)
        else:
            if open_calls:
                return "Every tool call needs its result before the next message."
            if role == previous and role in ("user", "assistant"):
                return f"Cannot have 2 or more {role} messages in a row."
            open_calls = {c.get("id") for c in message.get("tool_calls") or ()}
        previous = role
    if roles[-1] == "assistant":
        return "Cannot have 2 or more assistant messages at the end of the list."
    return None


def _default(phase: str) -> Reply:
    if phase == "reason":
        return reason("I can answer this directly.")
    if phase == "observe":
        return observe("I have what I need.", final="Here is the answer.")
    if phase == "act":
        return Reply(chunks=[])
    return text("Here is the answer.")
