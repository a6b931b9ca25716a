"""OpenAIChatModel: the ChatModel port over any OpenAI-compatible chat-completions endpoint.

Each call is one POST built here and sent through an httpx client: the SDK's per-call
machinery (options models, request building, the response wrapper) cost more CPU than the
rest of the server's work on a step. The SDK still resolves the configuration once (base URL,
`OPENAI_BASE_URL`, the key, its default headers) and provides the error classes; the request
carries what its own `create()` would send: the same URL, headers and JSON body
(orjson-encoded). The default client is the SDK's aiohttp-backed one (`openai[aiohttp]`): the
same httpx interface and errors, with aiohttp's C parser reading the stream.

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
import json
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

import anyio
import httpx2
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

from agent.adapters.sse import MalformedChunk, SSELines, StreamState, ThinkSplitter
from agent.conversation import normalize
from agent.errors import ContextTooLong, ModelError
from agent.messages import Message
from agent.ports import CallInfo, ModelTurn, RetryNotice, Thinking, ToolChoice, ToolSpec

__all__ = ["OpenAIChatModel", "ThinkSplitter"]

_log = logging.getLogger(__name__)

# What the SDK maps to APIConnectionError when sending fails (a timeout: APITimeoutError).
_SEND_ERRORS = (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)

# The SDK's exception class per HTTP status (5xx: InternalServerError, others APIStatusError).
_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return False


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
        http_client: httpx2.AsyncClient | None = None,  # tests' transports
    ) -> None:
        self._http = http_client or _default_client()
        self._client = AsyncOpenAI(
            api_key=api_key or "unset",
            base_url=base_url or None,
            timeout=timeout_s,
            max_retries=0,
            http_client=self._http,
        )
        base = self._client.base_url  # as the SDK joins it with a path
        self._url = base.copy_with(raw_path=base.raw_path + b"chat/completions")
        self._timeout = httpx2.Timeout(timeout_s)
        self._timeouts = self._timeout.as_dict()
        # The client's headers overridden by the SDK's, as `build_request` merges them, once:
        # merging ~20 headers on every call cost more than the rest of building the request.
        merged = httpx2.Headers(self._http.headers)
        merged.update(_sdk_headers(self._client, self._timeout))
        self._headers = merged.multi_items()
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
        # The keys in the order the SDK sends them, so the body is the one it would send.
        body: dict[str, Any] = {
            "model": self._model,
            "stream": True,
            "messages": [m.to_openai() for m in normalize(messages)],
        }
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
        headers = httpx2.Headers(
            [
                *self._headers,
                ("X-Agent-Session", call.session_id),
                ("X-Agent-Run", call.run_id),
                ("X-Agent-Step", str(call.step)),
                ("X-Agent-Phase", call.phase),
            ]
        )
        response = await self._open(orjson.dumps(body), headers, call)
        try:
            async for item in self._read(response):
                yield item
        finally:
            await response.aclose()  # also when cancelled: the model stops generating

    async def _open(self, body: bytes, headers: httpx2.Headers, call: CallInfo) -> httpx2.Response:
        """Send the request (retrying transient failures) and return the open stream."""
        total = self._max_retries + 1

        async def before_sleep(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome else None
            delay = state.next_action.sleep if state.next_action else 0.0
            await _notify(call, state.attempt_number + 2, total, failure, delay)

        try:
            try:
                return await self._send(body, headers)
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
                    return await self._send(body, headers)
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

    async def _send(self, body: bytes, headers: httpx2.Headers) -> httpx2.Response:
        """One attempt; failures raised as the SDK raises them (APIConnectionError,
        APITimeoutError, APIStatusError and its subclasses). The request is what the client's
        `build_request` makes (its headers were merged at startup), with the client's cookies,
        so a gateway's sticky-session cookie still goes back."""
        request = httpx2.Request(
            "POST",
            self._url,
            content=body,
            headers=headers,
            cookies=self._http.cookies,
            extensions={"timeout": self._timeouts},
        )
        try:
            response = await self._http.send(request, stream=True)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request) from exc
        except _SEND_ERRORS as exc:
            raise openai.APIConnectionError(request=request) from exc
        if not response.is_success:
            try:
                await response.aread()
            finally:
                await response.aclose()
            raise _status_error(response)
        return response

    async def _read(self, response: httpx2.Response) -> AsyncIterator[str | Thinking | ModelTurn]:
        """Read the server-sent events ourselves (agent/adapters/sse.py).

        Each time this generator resumes it reads everything that arrived meanwhile (aiohttp
        keeps receiving into its buffer while the caller is busy, and one read takes what is
        buffered, up to 16 KiB) and yields all the text in it as one piece (thinking
        likewise, in order). Every piece becomes an event for each client, so a stream that
        arrives faster than it is forwarded costs fewer, larger events, and a slow one is
        passed on chunk by chunk. No reader task: a chunk costs no extra task switch.
        """
        state = StreamState()
        lines = SSELines()
        failure: Exception | None = None
        async with aclosing(response.aiter_bytes()) as chunks:
            while failure is None:
                try:
                    data = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as exc:  # noqa: BLE001 - a broken stream fails the call below
                    failure = exc
                    break
                try:
                    for line in lines.feed(data):
                        state.line(line)
                except Exception as exc:  # noqa: BLE001 - a malformed chunk, likewise
                    failure = exc
                for item in state.take():
                    yield item
        if failure is None:
            try:
                for line in lines.finish():
                    state.line(line)
                state.finish()
            except Exception as exc:  # noqa: BLE001
                failure = exc
            for item in state.take():
                yield item
        if failure is not None:
            raise ModelError(
                f"The language model's reply broke off or could not be read ({_reason(failure)})."
            ) from failure
        yield state.turn()


def _default_client() -> httpx2.AsyncClient:
    """The SDK's aiohttp-backed client (`openai[aiohttp]`): the same httpx interface, errors
    and timeouts, but aiohttp's C HTTP parser reads the stream. On the request path it costs
    about 60% of the CPU of httpx's own transport (docs/benchmarks.md)."""
    return openai.DefaultAioHttpClient()


def _sdk_headers(client: AsyncOpenAI, timeout: httpx2.Timeout) -> dict[str, str]:
    """The headers the SDK's `with_streaming_response.create()` sends, computed once: none of
    them changes between calls (the key, the SDK's version and platform, the timeout)."""
    merged = {**client.auth_headers, **client.default_headers}
    headers = {name: value for name, value in merged.items() if isinstance(value, str)}
    headers["X-Stainless-Raw-Response"] = "stream"
    headers["X-Stainless-Retry-Count"] = "0"  # each of our attempts is a first one to the SDK
    if timeout.read is not None:
        headers["X-Stainless-Read-Timeout"] = str(timeout.read)
    return headers


def _status_error(response: httpx2.Response) -> openai.APIStatusError:
    """The SDK's exception for an error answer, with the same message and `body` (the JSON
    body's `error` object when there is one, else the parsed body, else its text)."""
    status = response.status_code
    message = f"Error code: {status}"
    text = response.text.strip()
    body: Any = text
    try:
        body = json.loads(text)
    except ValueError:
        pass
    else:
        error = body.get("error", body) if isinstance(body, dict) else None
        detail = error.get("message") if isinstance(error, dict) else None
        if isinstance(detail, str) and detail:
            message += f" - {detail}"
    data = body.get("error", body) if isinstance(body, dict) else body
    default = openai.InternalServerError if status >= 500 else openai.APIStatusError
    return _STATUS_ERRORS.get(status, default)(message, response=response, body=data)


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


def _reason(exc: BaseException) -> str:
    if isinstance(exc, MalformedChunk):
        return str(exc)
    if isinstance(exc, orjson.JSONDecodeError):
        return "a stream chunk is not valid JSON"
    cause = exc.__cause__ or exc.__context__
    return type(cause).__name__ if cause is not None else type(exc).__name__
