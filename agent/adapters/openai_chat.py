"""OpenAIChatModel: the ChatModel port over any OpenAI-compatible chat-completions endpoint.

Retry policy (ours, not the SDK's: the client is built with max_retries=0): connection errors,
timeouts, 429 and 5xx are retried with exponential backoff and jitter, up to `max_retries`
times, but only while opening the stream. Once text has reached the caller a retry would repeat
it, so a stream that breaks later fails the call. Other 4xx answers fail at once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
import orjson
from openai import AsyncOpenAI
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from agent.errors import ModelError
from agent.messages import Message, ToolCall
from agent.ports import CallInfo, ModelTurn, ToolSpec

__all__ = ["OpenAIChatModel"]


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
    ) -> None:
        self._client = AsyncOpenAI(
            api_key=api_key or "unset",
            base_url=base_url or None,
            timeout=timeout_s,
            max_retries=0,
        )
        self._model = model
        self._max_retries = max_retries
        self._stream_usage = stream_usage
        self._wait = wait_exponential_jitter(multiplier=retry_initial_s, max=retry_max_s)
        self._first_wait = retry_initial_s

    async def aclose(self) -> None:
        await self._client.close()

    async def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec], call: CallInfo
    ) -> AsyncIterator[str | ModelTurn]:
        body: dict[str, Any] = {"messages": [m.to_openai() for m in messages]}
        if self._stream_usage:
            body["stream_options"] = {"include_usage": True}
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
        manager = await self._open(request)
        try:
            async for item in self._read(manager.response):
                yield item
        finally:
            await manager.close()

    async def _open(self, request: dict[str, Any]) -> _OpenStream:
        """Send the request (retrying transient failures) and return the open stream."""
        try:
            try:
                return await self._send(request)
            except Exception as exc:
                if not _transient(exc) or self._max_retries == 0:
                    raise
            await asyncio.sleep(self._first_wait)  # back off before the first retry too
            attempts = AsyncRetrying(  # built only after a failure: the common call is fast
                stop=stop_after_attempt(self._max_retries),
                wait=self._wait,
                retry=retry_if_exception(_transient),
                reraise=True,
            )
            async for attempt in attempts:
                with attempt:
                    return await self._send(request)
        except openai.APIStatusError as exc:
            raise ModelError(
                f"The language model answered with an error (HTTP {exc.status_code})."
            ) from exc
        except openai.APIError as exc:
            raise ModelError(f"The language model could not be reached ({_reason(exc)}).") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, request: dict[str, Any]) -> _OpenStream:
        context = self._client.chat.completions.with_streaming_response.create(**request)
        return _OpenStream(context, await context.__aenter__())

    async def _read(self, response: Any) -> AsyncIterator[str | ModelTurn]:
        """Read the server-sent events ourselves: the SDK's typed chunk objects cost about
        100 µs each, more than everything else the server does per streamed token."""
        text: list[str] = []
        parts: dict[int, _ToolCallParts] = {}
        usage = (0, 0)
        finish_reason: str | None = None
        try:
            async for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # comments, event names, keep-alives
                data = line[5:].strip()
                if data == "[DONE]":
                    continue  # read to the end, so the connection goes back to the pool
                chunk = orjson.loads(data)
                if not isinstance(chunk, dict):
                    raise _MalformedChunk("a stream chunk is not a JSON object")
                if "error" in chunk:
                    raise _MalformedChunk(f"the stream reported an error: {_error_text(chunk)}")
                if chunk.get("usage"):
                    usage = (
                        _int(chunk["usage"].get("prompt_tokens")),
                        _int(chunk["usage"].get("completion_tokens")),
                    )
                for choice in (chunk.get("choices") or ())[:1]:
                    finish_reason = _str(choice.get("finish_reason")) or finish_reason
                    delta = choice.get("delta") or {}
                    content = _str(delta.get("content"))
                    if content:
                        text.append(content)
                        yield content
                    for tc in delta.get("tool_calls") or ():
                        part = parts.setdefault(_int(tc.get("index")), _ToolCallParts())
                        part.id = part.id or _str(tc.get("id"))
                        function = tc.get("function") or {}
                        part.name = part.name or _str(function.get("name"))
                        part.arguments.append(_str(function.get("arguments")))
        except Exception as exc:  # noqa: BLE001 - whatever breaks a stream ends this call
            raise ModelError(
                f"The language model's reply broke off or could not be read ({_reason(exc)})."
            ) from exc
        calls = tuple(
            ToolCall(p.id or f"call_{uuid.uuid4().hex[:24]}", p.name, "".join(p.arguments))
            for _, p in sorted(parts.items())
        )
        yield ModelTurn("".join(text), calls, usage[0], usage[1], finish_reason)


@dataclass(slots=True)
class _OpenStream:
    """An entered streaming response and the context that must be exited to release it."""

    context: Any
    response: Any

    async def close(self) -> None:
        await self.context.__aexit__(None, None, None)


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
