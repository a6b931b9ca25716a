"""OpenAIChatModel: the ChatModel port over any OpenAI-compatible chat-completions endpoint.

Each call is one POST built here: the JSON body (orjson-encoded) the openai SDK's `create()`
would send, to the same URL (`base_url` + `chat/completions`), with the key as a bearer
token and the four `X-Agent-*` headers. It goes through an `HttpTransport`
(agent/adapters/http.py: aiohttp, directly); the reply's server-sent events are read from
bytes (agent/adapters/sse.py). The SDK itself is not used: its per-call machinery and its
httpx wrapper around aiohttp cost more CPU than the rest of a step's server work, and
importing it took half a second at every start. Its request and its error messages stay
the reference: tests compare ours with them.

Retry policy: connection errors, timeouts, 429 and 5xx are retried with exponential backoff
and jitter (or after the server's `Retry-After`, up to a minute), up to `max_retries` times,
while opening the stream or while nothing of it has reached the caller; `CallInfo.on_retry`
hears of each retry first. Once text has reached the caller a retry would repeat it, so a
stream that breaks later fails the call.
Other 4xx answers fail at once; one that says the prompt is longer than the context window
raises ContextTooLong, so the loop can compact and try once more.

Every request goes through `normalize` (agent/conversation.py) first: strict chat templates
(llama.cpp, vLLM, gateways to Anthropic) refuse what OpenAI tolerates. Reasoning models'
thinking (`reasoning_content`, `reasoning`, or a leading `<think>…</think>`) is yielded as
`Thinking`, never as text.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import orjson
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from agent.adapters.config import ModelConfig
from agent.adapters.http import AiohttpTransport, HttpReply, HttpTransport, Unreachable
from agent.adapters.sse import MalformedChunk, SSELines, StreamState, ThinkSplitter
from agent.conversation import normalize
from agent.errors import ContextTooLong, ModelError
from agent.messages import Message
from agent.ports import CallInfo, ModelTurn, RetryNotice, Thinking, ToolChoice, ToolSpec

__all__ = ["OpenAIChatModel", "StatusError", "ThinkSplitter"]

_log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the SDK's, also when OPENAI_BASE_URL is unset
_SCOPE_HEADERS = (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID"))


_Item = str | Thinking | ModelTurn  # what a stream yields


class StatusError(Exception):
    """The model server answered with an error status. `message` and `body` are what the
    openai SDK's APIStatusError would carry: "Error code: N" and the server's own message,
    and the body's `error` object (else the parsed body, else its text)."""

    def __init__(
        self, status: int, message: str, body: Any, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status
        self.message = message
        self.body = body
        self.retry_after_s = retry_after_s  # the server's `Retry-After`, when it is usable


def _worth_retrying(exc: BaseException) -> bool:
    """A transient failure to open the stream, or one of a stream that broke before its
    first item (the reader's ModelError, caused by it)."""
    if isinstance(exc, ModelError):
        return _transient(exc.__cause__)
    return _transient(exc)


def _transient(exc: BaseException | None) -> bool:
    if isinstance(exc, Unreachable):
        return not exc.lasting
    if isinstance(exc, StatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return False


class OpenAIChatModel:
    """Stream chat completions; assemble streamed tool calls; count tokens."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        retry_initial_s: float = 0.5,
        retry_max_s: float = 8.0,
        transport: HttpTransport | None = None,  # tests' chosen reads
    ) -> None:
        """`config` is the `[llm]` section (or a ModelConfig of one's own)."""
        self._transport = transport or AiohttpTransport(config.timeout_s)
        base = config.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self._url = base.rstrip("/") + "/chat/completions"
        api_key = config.api_key.get_secret_value()
        # Built once: none of them changes between calls. The organization and project come
        # from the variables the SDK reads for them, so an OpenAI key scoped to them still works.
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": _USER_AGENT,
            "Authorization": f"Bearer {api_key or 'unset'}",
        }
        for header, variable in _SCOPE_HEADERS:
            if value := os.environ.get(variable):
                self._headers[header] = value
        self._secret = api_key  # kept out of every reason the server gives back
        self._config = config
        self._first_wait = retry_initial_s
        # From the second retry: retry_initial_s * 2 ** (retries before it), plus jitter.
        self._backoff = wait_exponential_jitter(multiplier=retry_initial_s / 2, max=retry_max_s)
        self._structured = True  # until the server refuses a response_format
        self._window: int | None = None
        self._window_asked_at: float | None = None

    @property
    def structured_output(self) -> bool:
        """Whether a `response_format` is sent: until the server refused one."""
        return self._structured

    @property
    def model_name(self) -> str:
        """The model requested, for traces (`gen_ai.request.model`)."""
        return self._config.model

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec],
        call: CallInfo,
        tool_choice: ToolChoice = "auto",
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[str | Thinking | ModelTurn]:
        # The keys in the order the SDK sends them, so the body is the one it would send.
        body: dict[str, Any] = {
            "model": self._config.model,
            "stream": True,
            "messages": [m.to_openai() for m in normalize(messages)],
        }
        if self._config.stream_usage:
            body["stream_options"] = {"include_usage": True}
        if self._config.temperature is not None or temperature is not None:
            body["temperature"] = (
                self._config.temperature if self._config.temperature is not None else temperature
            )
        if self._config.max_tokens is not None or max_tokens is not None:
            body["max_tokens"] = self._config.max_tokens or max_tokens
        if response_format is not None and self._structured:
            body["response_format"] = response_format
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
        headers = {
            **self._headers,
            "X-Agent-Session": call.session_id,
            "X-Agent-Run": call.run_id,
            "X-Agent-Step": str(call.step),
            "X-Agent-Phase": call.phase,
        }
        data = orjson.dumps(body)
        try:
            reply, reader, first = await self._start(data, headers, call)
        except ModelError as exc:
            if "response_format" not in body or not _refuses_structure(exc.__cause__):
                raise
            # A server that cannot constrain its output: ask as before, and read text.
            self._structured = False
            _log.warning("the model server refused response_format; replies are read as text")
            del body["response_format"]
            data = orjson.dumps(body)
            reply, reader, first = await self._start(data, headers, call)
        try:
            if first is not None:
                yield first
                async for item in reader:  # shown as it comes: a failure now fails the call
                    yield item
        finally:
            reply.close()  # also when cancelled: the model stops generating

    async def context_window(self) -> int | None:
        """The context window the model server runs with, when it says so: llama.cpp's
        `/props` (`n_ctx` of a slot), vLLM's `max_model_len` in `/v1/models`. Asked on first
        use and again at most once a minute while the server has not said."""
        if self._window is not None:
            return self._window
        get = getattr(self._transport, "get_json", None)
        now = time.monotonic()
        if get is None or (self._window_asked_at is not None and now - self._window_asked_at < 60):
            return None
        self._window_asked_at = now
        base = self._url.removesuffix("/chat/completions")
        headers = {"Authorization": self._headers["Authorization"], "Accept": "application/json"}
        props = await get(base.removesuffix("/v1") + "/props", headers)
        window = _props_window(props)
        if window is None:
            window = _models_window(await get(base + "/models", headers), self._config.model)
        self._window = window
        return window

    def _retrying(self, call: CallInfo) -> AsyncRetrying:
        """The retry policy of a model call (the module's docstring): each retry is announced
        to `call.on_retry` (which attempt comes, of how many, why, after how long) first."""
        total = self._config.max_retries + 1

        async def announce(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome else None
            if isinstance(failure, ModelError):  # the stream broke: say how
                failure = failure.__cause__
            delay = state.next_action.sleep if state.next_action else 0.0
            await _notify(call, state.attempt_number + 1, total, failure, delay)

        return AsyncRetrying(
            stop=stop_after_attempt(total),
            wait=self._wait,
            retry=retry_if_exception(_worth_retrying),
            reraise=True,
            before_sleep=announce,
        )

    def _wait(self, state: RetryCallState) -> float:
        """The wait a busy server asked for, else `retry_initial_s` before the first retry,
        then twice as long each time (with up to a second of jitter), at most `retry_max_s`."""
        failure = state.outcome.exception() if state.outcome else None
        asked = _asked_wait(failure)
        if asked is not None:
            return asked
        return self._first_wait if state.attempt_number == 1 else self._backoff(state)

    async def _start(
        self, body: bytes, headers: dict[str, str], call: CallInfo
    ) -> tuple[HttpReply, AsyncIterator[_Item], _Item | None]:
        """Send the request and read up to the reply's first item, trying again under the
        retry policy; return the open reply, its reader, and that item (None: nothing came).
        Nothing has reached the caller yet, so asking again repeats nothing."""
        try:
            async for attempt in self._retrying(call):
                with attempt:
                    reply = await self._send(body, headers)
                    reader = self._read(reply)
                    try:
                        return reply, reader, await anext(reader, None)
                    except BaseException:
                        reply.close()
                        raise
        except StatusError as exc:
            too_long = _context_overflow(exc)
            if too_long is not None:
                raise too_long from exc
            # The server's own reason says what to fix ("model 'x' does not exist"), except
            # for a refused key: its reason may quote part of the key, in the log too. Any
            # other reason loses whatever of the key it quotes.
            detail = _redacted(_status_detail(exc), self._secret)
            if exc.status_code in _AUTH_STATUSES:
                detail = " (its reason is not shown: it may quote the API key)"
            _log.warning("model call refused: HTTP %s%s", exc.status_code, detail)
            shown = "" if exc.status_code in _AUTH_STATUSES else detail.rstrip(".")
            raise ModelError(
                f"The language model answered with an error (HTTP {exc.status_code}){shown}."
            ) from exc
        except Unreachable as exc:
            if exc.timed_out:  # it may be up but slow: say which setting bounds the wait
                raise ModelError(
                    "The language model did not answer within llm.timeout_s "
                    f"({self._config.timeout_s:g} s)."
                ) from exc
            raise ModelError(f"The language model could not be reached ({exc.reason}).") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, body: bytes, headers: dict[str, str]) -> HttpReply:
        """One attempt: the open reply, or Unreachable, or StatusError for an error answer."""
        reply = await self._transport.post(self._url, body, headers)
        if 200 <= reply.status < 300:
            return reply
        try:
            content = await reply.read_all()
        finally:
            reply.close()
        raise _status_error(reply.status, content, _retry_after(reply.header("Retry-After")))

    async def _read(self, reply: HttpReply) -> AsyncIterator[_Item]:
        """Read the server-sent events ourselves (agent/adapters/sse.py).

        Each time this generator resumes it reads everything that arrived meanwhile (aiohttp
        keeps receiving into its buffer while the caller is busy, and one read takes all of
        it) and yields all the text in it as one piece (thinking likewise, in order). Every
        piece becomes an event for each client, so a stream that arrives faster than it is
        forwarded costs fewer, larger events, and a slow one is passed on chunk by chunk. No
        reader task: a chunk costs no extra task switch.
        """
        state = StreamState()
        lines = SSELines()
        failure: Exception | None = None
        while failure is None:
            try:
                data = await reply.read_some()
            except Exception as exc:  # noqa: BLE001 - a broken stream fails the call below
                failure = exc
                break
            if not data:
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
            reason = _reason(failure)
            if any(word in reason.lower() for word in _CONTEXT_WORDS):
                # The prompt fit; the reply filled the rest of the window (no output limit).
                raise ModelError(
                    "The model server's context filled up while the model was writing its "
                    f"reply ({reason}). Give it a larger context (llama.cpp: --ctx-size; "
                    "Ollama: num_ctx), or set [llm] max_tokens and [context] window_tokens "
                    "to fit the one it has."
                ) from failure
            if isinstance(failure, Unreachable) and failure.timed_out:
                raise ModelError(
                    "The language model sent nothing for longer than llm.timeout_s "
                    f"({self._config.timeout_s:g} s) while writing its reply."
                ) from failure
            raise ModelError(
                f"The language model's reply broke off or could not be read ({reason})."
            ) from failure
        yield state.turn()


def _user_agent() -> str:
    try:
        return f"agent-server/{version('agent-server')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "agent-server"


_USER_AGENT = _user_agent()


RETRY_AFTER_MAX_S = 60.0  # a longer wait asked for is not waited: the usual backoff applies


def _retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds (a number, or an HTTP date), when it is one to wait for."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time() if when.tzinfo else -1.0
    return seconds if 0 <= seconds <= RETRY_AFTER_MAX_S else None


def _asked_wait(failure: BaseException | None) -> float | None:
    """The wait a busy server asked for before the next attempt (429 or 503 with
    `Retry-After`), instead of the backoff: an attempt before it is refused again."""
    return failure.retry_after_s if isinstance(failure, StatusError) else None


def _status_error(status: int, content: bytes, retry_after_s: float | None = None) -> StatusError:
    """The error answer as the SDK reads it: the same message and `body` (the JSON body's
    `error` object when there is one, else the parsed body, else its text)."""
    message = f"Error code: {status}"
    text = content.decode(errors="replace").strip()
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
    return StatusError(status, message, data, retry_after_s)


async def _notify(
    call: CallInfo, attempt: int, total: int, failure: BaseException | None, delay_s: float
) -> None:
    if call.on_retry is not None:
        reason = _retry_reason(failure) if failure is not None else "the call failed"
        await call.on_retry(RetryNotice(attempt, total, reason, delay_s))


# Reasons of a connection that was made and then lost (agent/adapters/http.py `_name`): for a
# retry, only a stream that broke before anything of it was shown meets them.
_BROKE_OFF = ("the server closed the connection", "the connection closed before its end")


def _retry_reason(exc: BaseException) -> str:
    """Plain words for a transient failure: what a user may read."""
    if isinstance(exc, Unreachable):
        if exc.timed_out:
            return "the model server did not answer in time"
        if exc.reason in _BROKE_OFF:
            return "the model server's reply broke off before its first text"
        return "the model server could not be reached"
    if isinstance(exc, StatusError):
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


def _context_overflow(exc: StatusError) -> ContextTooLong | None:
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


_AUTH_STATUSES = (401, 403, 407)

_STRUCTURE_WORDS = ("response_format", "json_schema", "grammar", "structured output")


def _refuses_structure(exc: BaseException | None) -> bool:
    """A 400/422 that names the response_format: the server cannot constrain its output."""
    if not isinstance(exc, StatusError) or exc.status_code not in (400, 422):
        return False
    return any(word in str(exc.message).lower() for word in _STRUCTURE_WORDS)


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _props_window(props: object) -> int | None:
    """llama.cpp: `{"default_generation_settings": {"n_ctx": 8192}, ...}` (a slot's window)."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    return _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None


def _models_window(models: object, model: str) -> int | None:
    """vLLM: `{"data": [{"id": …, "max_model_len": 32768}]}`; the named model's, else the
    only one's."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return None
    entries = [m for m in data if isinstance(m, dict)]
    chosen = [m for m in entries if m.get("id") == model] or (entries if len(entries) == 1 else [])
    return _positive(chosen[0].get("max_model_len")) if chosen else None


def _status_detail(exc: StatusError) -> str:
    """The server's own short reason, when it gave one (never the request's content)."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    message = error.get("message") if isinstance(error, dict) else None
    return f": {str(message)[:160]}" if message else ""


_KEYLIKE = re.compile(r"[A-Za-z0-9_\-]{6,}")


def _redacted(text: str, secret: str) -> str:
    """`text` with every run of six or more key characters that is part of `secret` masked:
    a server quoting the key, whole or in part (`sk-abc…xyz`), gives none of it away."""
    if not secret:
        return text
    return _KEYLIKE.sub(lambda m: "***" if m.group() in secret else m.group(), text)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, MalformedChunk):
        return str(exc)
    if isinstance(exc, orjson.JSONDecodeError):
        return "a stream chunk is not valid JSON"
    if isinstance(exc, Unreachable):
        return exc.reason
    return type(exc).__name__
