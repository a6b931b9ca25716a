"""OpenAIChatModel: the ChatModel port over any OpenAI-compatible chat-completions endpoint.

Retry policy (ours, not the SDK's: the client is built with max_retries=0): connection errors,
timeouts, 429 and 5xx are retried with exponential backoff and jitter, up to `max_retries`
times, but only while opening the stream. Once text has reached the caller a retry would repeat
it, so a stream that breaks later fails the call. Other 4xx answers fail at once.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
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

    async def aclose(self) -> None:
        await self._client.close()

    async def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec], call: CallInfo
    ) -> AsyncIterator[str | ModelTurn]:
        request: dict[str, Any] = {
            "model": self._model,
            "messages": [m.to_openai() for m in messages],
            "stream": True,
            "extra_headers": {
                "X-Agent-Session": call.session_id,
                "X-Agent-Run": call.run_id,
                "X-Agent-Step": str(call.step),
                "X-Agent-Phase": call.phase,
            },
        }
        if self._stream_usage:
            request["stream_options"] = {"include_usage": True}
        if tools:
            request["tools"] = [
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
        stream = await self._open(request)
        async for item in self._read(stream):
            yield item

    async def _open(self, request: dict[str, Any]) -> Any:
        attempts = AsyncRetrying(
            stop=stop_after_attempt(self._max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(_transient),
            reraise=True,
        )
        try:
            async for attempt in attempts:
                with attempt:
                    return await self._client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise ModelError(
                f"The language model answered with an error (HTTP {exc.status_code})."
            ) from exc
        except openai.APIError as exc:
            raise ModelError(f"The language model could not be reached ({_reason(exc)}).") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, stream: Any) -> AsyncIterator[str | ModelTurn]:
        text: list[str] = []
        parts: dict[int, _ToolCallParts] = {}
        usage = (0, 0)
        finish_reason: str | None = None
        try:
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = (_int(chunk.usage.prompt_tokens), _int(chunk.usage.completion_tokens))
                for choice in (chunk.choices or ())[:1]:
                    finish_reason = _str(choice.finish_reason) or finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        content = _str(delta.content)
                        text.append(content)
                        yield content
                    for tc in delta.tool_calls or ():
                        part = parts.setdefault(_int(tc.index), _ToolCallParts())
                        part.id = part.id or _str(tc.id)
                        if tc.function is not None:
                            part.name = part.name or _str(tc.function.name)
                            part.arguments.append(_str(tc.function.arguments))
        except Exception as exc:  # noqa: BLE001 - whatever breaks a stream ends this call
            raise ModelError(
                f"The language model's reply broke off or could not be read ({_reason(exc)})."
            ) from exc
        finally:
            await stream.close()
        calls = tuple(
            ToolCall(p.id or f"call_{uuid.uuid4().hex[:24]}", p.name, "".join(p.arguments))
            for _, p in sorted(parts.items())
        )
        yield ModelTurn("".join(text), calls, usage[0], usage[1], finish_reason)


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
    cause = exc.__cause__ or exc.__context__
    return type(cause).__name__ if cause is not None else type(exc).__name__
