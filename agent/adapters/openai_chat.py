"""OpenAIChatModel: the ChatModel port over any OpenAI-compatible chat-completions endpoint.

Retry policy (ours, not the SDK's: the client is built with max_retries=0): connection errors,
timeouts, 429 and 5xx are retried with exponential backoff and jitter, up to `max_retries`
times, but only while opening the stream; `CallInfo.on_retry` hears of each retry first. Once
text has reached the caller a retry would repeat it, so a stream that breaks later fails the
call. Other 4xx answers fail at once; one that says the prompt is longer than the context
window raises ContextTooLong, so the loop can compact and try once more.

Every request goes through `normalize` (agent/conversation.py) first: strict chat templates
(llama.cpp, vLLM, gateways to Anthropic) refuse what OpenAI tolerates. Reasoning models'
thinking (`reasoning_content`, `reasoning`, or a leading `<think>…</think>`) is yielded as
`Thinking`, never as text.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
import orjson
from openai import AsyncOpenAI
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from agent.conversation import normalize
from agent.errors import ContextTooLong, ModelError
from agent.messages import Message, ToolCall
from agent.ports import CallInfo, ModelTurn, RetryNotice, Thinking, ToolChoice, ToolSpec

__all__ = ["OpenAIChatModel", "ThinkSplitter"]

_log = logging.getLogger(__name__)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return False


@dataclass(slots=True)
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class OpenAIChatModel:
    """Stream chat completions; assemble streamed tool calls; count tokens."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        stream_usage: bool = True,
        retry_initial_s: float = 0.5,
        retry_max_s: float = 8.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        http_client: Any = None,  # the SDK's own AsyncClient type, for tests' transports
    ) -> None:
        self._client = AsyncOpenAI(
            api_key=api_key or "unset",
            base_url=base_url or None,
            timeout=timeout_s,
            max_retries=0,
            http_client=http_client,
        )
        self._model = model
        self._max_retries = max_retries
        self._stream_usage = stream_usage
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._wait = wait_exponential_jitter(multiplier=retry_initial_s, max=retry_max_s)
        self._first_wait = retry_initial_s

    @property
    def model_name(self) -> str:
        """The model requested, for traces (`gen_ai.request.model`)."""
        return self._model

    async def aclose(self) -> None:
        await self._client.close()

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec],
        call: CallInfo,
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[str | Thinking | ModelTurn]:
        body: dict[str, Any] = {"messages": [m.to_openai() for m in normalize(messages)]}
        if self._stream_usage:
            body["stream_options"] = {"include_usage": True}
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
            if tool_choice != "auto":
                body["tool_choice"] = tool_choice
        request: dict[str, Any] = {
            "model": self._model,
            # The body goes as `extra_body`, which the SDK sends as is: its typed transform of
            # `messages` costs milliseconds per call on a long conversation, every call.
            "messages": [],
            "stream": True,
            "extra_body": body,
            "extra_headers": {
                "X-Agent-Session": call.session_id,
                "X-Agent-Run": call.run_id,
                "X-Agent-Step": str(call.step),
                "X-Agent-Phase": call.phase,
            },
        }
        manager = await self._open(request, call)
        try:
            async for item in self._read(manager.response):
                yield item
        finally:
            await manager.close()

    async def _open(self, request: dict[str, Any], call: CallInfo) -> _OpenStream:
        """Send the request (retrying transient failures) and return the open stream."""
        total = self._max_retries + 1

        async def before_sleep(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome else None
            delay = state.next_action.sleep if state.next_action else 0.0
            await _notify(call, state.attempt_number + 2, total, failure, delay)

        try:
            try:
                return await self._send(request)
            except Exception as exc:
                if not _transient(exc) or self._max_retries == 0:
                    raise
                await _notify(call, 2, total, exc, self._first_wait)
            await asyncio.sleep(self._first_wait)  # back off before the first retry too
            attempts = AsyncRetrying(  # built only after a failure: the common call is fast
                stop=stop_after_attempt(self._max_retries),
                wait=self._wait,
                retry=retry_if_exception(_transient),
                reraise=True,
                before_sleep=before_sleep,
            )
            async for attempt in attempts:
                with attempt:
                    return await self._send(request)
        except openai.APIStatusError as exc:
            too_long = _context_overflow(exc)
            if too_long is not None:
                raise too_long from exc
            _log.warning("model call refused: HTTP %s%s", exc.status_code, _status_detail(exc))
            raise ModelError(
                f"The language model answered with an error (HTTP {exc.status_code})."
            ) from exc
        except openai.APIError as exc:
            raise ModelError(f"The language model could not be reached ({_reason(exc)}).") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, request: dict[str, Any]) -> _OpenStream:
        context = self._client.chat.completions.with_streaming_response.create(**request)
        return _OpenStream(context, await context.__aenter__())

    async def _read(self, response: Any) -> AsyncIterator[str | Thinking | ModelTurn]:
        """Read the server-sent events ourselves: the SDK's typed chunk objects cost about
        100 µs each, more than everything else the server does per streamed token.

        A reader task parses the stream as it arrives; each time this generator resumes it
        yields all the text read since, as one piece (thinking likewise, in order). Every
        piece becomes an event for each client, so a stream that arrives faster than it is
        forwarded costs fewer, larger events, and a slow one is passed on chunk by chunk.
        """
        state = _StreamState()
        ready = asyncio.Event()
        reader = asyncio.create_task(_pump(response, state, ready))
        try:
            while not reader.done():
                await ready.wait()
                ready.clear()
                for item in state.take():
                    yield item
            for item in state.take():
                yield item
            failure = reader.exception()
        finally:
            if not reader.done():
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
        if failure is not None:
            raise ModelError(
                f"The language model's reply broke off or could not be read ({_reason(failure)})."
            ) from failure
        yield state.turn()


async def _pump(response: Any, state: _StreamState, ready: asyncio.Event) -> None:
    """Parse the stream into `state` as it arrives; set `ready` when there is something new
    to pass on, and once more at the end (the task's exception is the stream's failure)."""
    rest = b""
    try:
        async for data in response.iter_bytes():
            lines = (rest + data).split(b"\n") if rest else data.split(b"\n")
            rest = lines.pop()
            for line in lines:
                state.line(line)
            if state.out:
                ready.set()
        if rest:
            state.line(rest)
        state.finish()
    finally:
        ready.set()


_MERGE_ABOVE = 4  # pieces waiting; a short or slow reply keeps its chunks as they came


class _StreamState:
    """What a streamed reply said so far, and the pieces not yet passed on (adjacent pieces of
    one kind merged)."""

    __slots__ = ("events", "finish_reason", "out", "parts", "text", "think", "usage")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.parts: dict[int, _ToolCallParts] = {}
        self.usage = (0, 0, 0)
        self.finish_reason: str | None = None
        self.think = ThinkSplitter()
        self.out: list[tuple[bool, str]] = []
        self.events = 0  # server-sent `data:` lines: none at all is no answer, not an empty one

    def line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return  # comments, event names, keep-alives
        self.events += 1
        data = line[5:].strip()
        if data == b"[DONE]":
            return  # read to the end, so the connection goes back to the pool
        chunk = orjson.loads(data)
        if not isinstance(chunk, dict):
            raise _MalformedChunk("a stream chunk is not a JSON object")
        if "error" in chunk:
            raise _MalformedChunk(f"the stream reported an error: {_error_text(chunk)}")
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        for choice in (chunk.get("choices") or ())[:1]:
            self.finish_reason = _str(choice.get("finish_reason")) or self.finish_reason
            delta = choice.get("delta") or {}
            thought = _str(delta.get("reasoning_content") or delta.get("reasoning"))
            if thought:
                self._put(True, thought)
            content = _str(delta.get("content"))
            if content:
                for is_thinking, piece in self.think.feed(content):
                    self._put(is_thinking, piece)
            for tc in delta.get("tool_calls") or ():
                part = self.parts.setdefault(_int(tc.get("index")), _ToolCallParts())
                part.id = part.id or _str(tc.get("id"))
                function = tc.get("function") or {}
                part.name = part.name or _str(function.get("name"))
                part.arguments.append(_str(function.get("arguments")))

    def _put(self, is_thinking: bool, piece: str) -> None:
        if not is_thinking:
            self.text.append(piece)
        self.out.append((is_thinking, piece))

    def take(self) -> list[str | Thinking]:
        """The pieces not yet passed on: one by one when few wait, else adjacent pieces of one
        kind merged (a backlog costs one event per kind, not one per model chunk)."""
        out, self.out = self.out, []
        if len(out) <= _MERGE_ABOVE:
            return [Thinking(p) if thinking else p for thinking, p in out]
        merged: list[tuple[bool, list[str]]] = []
        for thinking, piece in out:
            if merged and merged[-1][0] == thinking:
                merged[-1][1].append(piece)
            else:
                merged.append((thinking, [piece]))
        return [Thinking("".join(p)) if thinking else "".join(p) for thinking, p in merged]

    def finish(self) -> None:
        if self.events == 0:
            raise _MalformedChunk("the reply held no server-sent events")
        for is_thinking, piece in self.think.finish():
            self._put(is_thinking, piece)

    def turn(self) -> ModelTurn:
        calls = tuple(
            ToolCall(p.id or f"call_{uuid.uuid4().hex[:24]}", p.name, "".join(p.arguments))
            for _, p in sorted(self.parts.items())
        )
        u = self.usage
        return ModelTurn("".join(self.text), calls, u[0], u[1], self.finish_reason, u[2])


@dataclass(slots=True)
class _OpenStream:
    """An entered streaming response and the context that must be exited to release it."""

    context: Any
    response: Any

    async def close(self) -> None:
        await self.context.__aexit__(None, None, None)


class ThinkSplitter:
    """Split a leading `<think>…</think>` block out of streamed text, across chunk borders.

    Only a block that opens before any visible text counts: a `<think>` later in an answer
    is the model talking about the tag.
    """

    _OPEN, _CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self._buffer = ""
        self._inside = False
        self._decided = False  # visible text was seen, or the block closed
        self._trim = False  # drop the white space right after a closed block

    def feed(self, chunk: str) -> list[tuple[bool, str]]:
        """Return (is_thinking, text) pieces that are safe to pass on now."""
        if self._decided and not self._inside:
            if self._trim:
                chunk = chunk.lstrip()
                self._trim = not chunk
            return [(False, chunk)] if chunk else []
        self._buffer += chunk
        out: list[tuple[bool, str]] = []
        while self._buffer:
            tag = self._CLOSE if self._inside else self._OPEN
            if not self._inside:
                stripped = self._buffer.lstrip()
                if stripped.startswith(tag):
                    self._buffer = stripped[len(tag) :]
                    self._inside = True
                    continue
                if stripped and not tag.startswith(stripped):
                    self._decided = True
                    out.append((False, self._buffer))
                    self._buffer = ""
                break
            end = self._buffer.find(tag)
            if end >= 0:
                if end:
                    out.append((True, self._buffer[:end]))
                self._buffer = self._buffer[end + len(tag) :].lstrip()
                self._inside = False
                self._decided = True
                self._trim = not self._buffer
                if self._buffer:
                    out.append((False, self._buffer))
                    self._buffer = ""
                break
            keep = next(
                (n for n in range(len(tag) - 1, 0, -1) if self._buffer.endswith(tag[:n])), 0
            )
            cut = len(self._buffer) - keep
            if cut:
                out.append((True, self._buffer[:cut]))
            self._buffer = self._buffer[cut:]
            break
        return out

    def finish(self) -> list[tuple[bool, str]]:
        """End of the stream: whatever is held back goes out as what it was."""
        rest, self._buffer = self._buffer, ""
        return [(self._inside, rest)] if rest else []


async def _notify(
    call: CallInfo, attempt: int, total: int, failure: BaseException | None, delay_s: float
) -> None:
    if call.on_retry is not None:
        reason = _retry_reason(failure) if failure is not None else "the call failed"
        await call.on_retry(RetryNotice(attempt, total, reason, delay_s))


def _retry_reason(exc: BaseException) -> str:
    """Plain words for a transient failure: what a user may read."""
    if isinstance(exc, openai.APITimeoutError):
        return "the model server did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        return "the model server could not be reached"
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code == 429:
            return "the model server is busy (HTTP 429)"
        return f"the model server had an error (HTTP {exc.status_code})"
    return type(exc).__name__


_CONTEXT_WORDS = (
    "context length",
    "context_length",
    "context size",
    "context window",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "exceed_context",
    "longer than the model",
)


def _context_overflow(exc: openai.APIStatusError) -> ContextTooLong | None:
    """A 400/413 whose message says the prompt does not fit, as ContextTooLong."""
    if exc.status_code not in (400, 413):
        return None
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    detail = error if isinstance(error, dict) else {}
    message = str(detail.get("message") or exc.message or "")
    kind = str(detail.get("type") or detail.get("code") or "")
    if not any(word in f"{message} {kind}".lower() for word in _CONTEXT_WORDS):
        return None
    window = detail.get("n_ctx")
    return ContextTooLong(
        "The conversation is longer than the model's context window"
        + (f" ({window} tokens)" if isinstance(window, int) else "")
        + ".",
        window if isinstance(window, int) and not isinstance(window, bool) else None,
    )


def _status_detail(exc: openai.APIStatusError) -> str:
    """The server's own short reason, when it gave one (never the request's content)."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    message = error.get("message") if isinstance(error, dict) else None
    return f": {str(message)[:160]}" if message else ""


def _usage(raw: Any) -> tuple[int, int, int]:
    if not isinstance(raw, dict):
        raise _MalformedChunk("usage is not an object")
    details = raw.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return _int(raw.get("prompt_tokens")), _int(raw.get("completion_tokens")), cached


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)[:200]


class _MalformedChunk(ValueError):
    """A streamed chunk whose fields have the wrong types (the SDK does not validate them)."""


def _str(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _MalformedChunk(f"expected text, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise _MalformedChunk(f"expected a number, got {type(value).__name__}")
    return value


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _MalformedChunk):
        return str(exc)
    if isinstance(exc, orjson.JSONDecodeError):
        return "a stream chunk is not valid JSON"
    cause = exc.__cause__ or exc.__context__
    return type(cause).__name__ if cause is not None else type(exc).__name__
