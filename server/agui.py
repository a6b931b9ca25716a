"""The AG-UI endpoint: `POST /agui` (a RunAgentInput, answered by server-sent events) and
`POST /agui/{thread_id}/stop`. docs/ag-ui.md is the contract; server/agui_events.py the
mapping from our wire frames to AG-UI events.

A request attaches to its session like a `/ws` connection (same auth, Origin rule, session
registry and live events), starts a run (or resumes the paused one) and streams that run's
frames, translated, until the run ends or pauses on a question. Closing the request does not
stop the run; `POST /agui/{thread_id}/stop` does. A thread id is the caller's own: the
session it names is found by server/agui_threads.py. server/app.py routes both here, and
imports this module (with the AG-UI SDK) on the first request.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    TextPart,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

from agent.errors import StorageError
from agent.ports import ToolSpec
from agent.validation import describe_errors
from server.agui_events import Translator
from server.agui_threads import session_of_thread
from server.live import LiveSession
from server.protocol import MAX_REASON_CHARS, ChatFrame, ProtocolError, check_echo_fits
from server.services import Services
from server.storage.base import Scope

__all__ = ["agui_endpoint", "preflight", "stop_endpoint"]

log = logging.getLogger(__name__)
_SESSION_GONE = 4404  # what DELETE /api/sessions/{id} closes watchers with
_THREAD_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI-compatible servers accept
_ABANDON_WAIT_S = 10.0  # how long a new message waits for the paused run it replaces to end
# Server-sent events through a proxy: nginx buffers responses unless told not to, and closes
# one that sends nothing for a while (60 s by default): a comment line keeps it open.
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_KEEPALIVE_S = 15.0
_KEEPALIVE = ": keepalive\n\n"
_STATUS = {
    "invalid_message": 400,
    "session_not_found": 404,
    "run_in_progress": 409,
    "too_many_runs": 429,
    "storage_unavailable": 503,
    "storage_quota_exceeded": 507,
    "no_active_run": 409,
    "not_awaiting_input": 409,
    "not_awaiting_approval": 409,
    "unknown_tool_call": 409,
    "already_decided": 409,
}


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _json(body: Any, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


class _Stream:
    """A session subscriber feeding one SSE response; its queue is bounded like a socket's."""

    def __init__(self, max_queued: int, max_bytes: int) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._max = max_queued
        self._max_bytes = max_bytes
        self._queued = 0  # characters waiting
        self.overflowed = False
        self.close_code: int | None = None
        self._closed = asyncio.Event()

    def deliver(self, text: str, seq: int | None) -> None:
        if self.overflowed:
            return
        if self._queue.qsize() >= self._max or self._queued + len(text) > self._max_bytes:
            self.overflowed = True
            self._queue.put_nowait(None)
            return
        self._queued += len(text)
        self._queue.put_nowait(text)

    async def next(self) -> str | None:
        """The next frame, or None: the stream ends."""
        text = await self._queue.get()
        if text is not None:
            self._queued -= len(text)
        return text

    def finish(self, code: int) -> None:
        self.close_code = code
        self._queue.put_nowait(None)

    def why(self) -> str:
        if self.overflowed:
            return "the client read too slowly; the run goes on"
        if self.close_code == _SESSION_GONE:
            return "the session was deleted"
        return "the server is going away; the run is being stopped"

    def closed(self) -> None:
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()


def _caller(request: Request, services: Services) -> Scope:
    if not services.auth.origin_allowed(request.headers.get("origin")):
        raise _Refused(403, "forbidden_origin", "This Origin is not allowed.")
    scope = services.auth.identify(request.headers, request.query_params.get("token"))
    if scope is None:
        raise _Refused(401, "unauthorized", "A valid 'Authorization: Bearer <token>' is required.")
    return scope


async def _read_input(request: Request, limit: int) -> RunAgentInput:
    body = bytearray()  # appended in place: a body sent in many small pieces is not re-copied
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise _Refused(413, "invalid_message", f"The body is over {limit} bytes.")
    except ClientDisconnect:  # gone before its body ended: nobody reads the answer
        raise _Refused(400, "invalid_message", "The body ended early.") from None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _Refused(400, "invalid_message", f"The body is not valid JSON: {exc}.") from None
    _check_counts(data)
    try:
        return RunAgentInput.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(describe_errors(exc, root="body"))
        raise _Refused(400, "invalid_message", f"Not a RunAgentInput: {problems}.") from None


_MOST_ITEMS = {"messages": 10_000, "tools": 1_024, "context": 1_024, "resume": 1_024}
_MOST_PARTS = 1_024  # of one message's content


def _check_counts(data: object) -> None:
    """Refuse lists longer than any client sends before validating them: validation costs
    per item, and a 1 MiB body of 400,000 wrong items would cost a second of the event loop."""
    if not isinstance(data, dict):
        return
    for key, most in _MOST_ITEMS.items():
        items = data.get(key)
        if isinstance(items, list) and len(items) > most:
            raise _Refused(400, "invalid_message", f"{key}: at most {most} (got {len(items)}).")
    messages = data.get("messages")
    for n, message in enumerate(messages if isinstance(messages, list) else ()):
        parts = message.get("content") if isinstance(message, dict) else None
        if isinstance(parts, list) and len(parts) > _MOST_PARTS:
            raise _Refused(
                400,
                "invalid_message",
                f"messages.{n}.content: at most {_MOST_PARTS} parts (got {len(parts)}).",
            )


def _may_create(services: Services, scope: Scope, run_input: RunAgentInput) -> bool:
    """Whether the request may make its thread: only one that starts a run, checked first
    (a refused request must not leave an empty conversation behind). An answer or a tool
    result is for a thread that exists."""
    last = run_input.messages[-1] if run_input.messages else None
    if run_input.resume or isinstance(last, ToolMessage):
        return False
    # Refuses what _begin would refuse, before anything is stored.
    services.hub.check_run(scope, _chat_frame(run_input), _client_tools(run_input))
    return True


async def _session_id(services: Services, scope: Scope, thread_id: str) -> str:
    """The caller's session for the thread (server/agui_threads.py)."""
    if not _THREAD_ID.fullmatch(thread_id):
        raise _Refused(400, "invalid_message", "threadId: 1-128 letters, digits, '_.:-'.")
    try:
        return await session_of_thread(services.store, scope, thread_id)
    except StorageError:
        raise _Refused(503, "storage_error", "The store is unavailable.") from None


async def _open(services: Services, scope: Scope, thread_id: str, create: bool) -> LiveSession:
    session_id = await _session_id(services, scope, thread_id)
    hub = services.hub
    try:
        live, _ = await hub.open(scope, session_id, create=create)
    except ProtocolError as exc:
        raise _Refused(404, exc.code, exc.message) from None
    except StorageError:
        raise _Refused(503, "storage_error", "The conversation store is unavailable.") from None
    try:
        await live.ensure_stored()
    except StorageError:
        hub.release(live)
        try:  # the id is another's (the insert failed) or the store is down
            await services.store.get_session(scope, session_id)
        except StorageError:
            raise _Refused(503, "storage_error", "The store is unavailable.") from None
        raise _Refused(404, "session_not_found", "There is no such session.") from None
    return live


def _user_text(run_input: RunAgentInput) -> str:
    """The last message, which must be the user's: the run's request. Earlier messages are
    the client's copy; the history the model sees is the stored one."""
    last = run_input.messages[-1] if run_input.messages else None
    if not isinstance(last, UserMessage):
        raise _Refused(400, "invalid_message", "messages: the last message must be the user's.")
    content = last.content
    if not isinstance(content, str):
        content = "\n".join(part.text for part in content if isinstance(part, TextPart))
    context = run_input.context or []
    if context:  # ambient information from the client goes to the model with the request
        lines = "\n".join(f"- {item.description}: {item.value}" for item in context)
        content = f"{content}\n\n[Context from the application]\n{lines}"
    return str(content)


def _chat_frame(run_input: RunAgentInput) -> ChatFrame:
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    fields = {k: props[k] for k in ("agent_mode", "agent_max_steps", "tools") if k in props}
    content = _user_text(run_input)
    if not content.strip():  # as for a `chat` on /ws
        parts = run_input.messages[-1].content
        if isinstance(parts, list) and any(not isinstance(p, TextPart) for p in parts):
            message = "messages: only text parts are read, and this message has none."
        else:
            message = "messages: the user's message is empty."
        raise _Refused(400, "invalid_message", message)
    try:
        return ChatFrame.model_validate({"type": "chat", "content": content, **fields})
    except ValidationError as exc:
        problems = "; ".join(describe_errors(exc, root="forwardedProps"))
        raise _Refused(400, "invalid_message", f"forwardedProps: {problems}.") from None


def _client_tools(run_input: RunAgentInput) -> list[ToolSpec]:
    """The frontend tools, as the model will see them: each name once, one the model's server
    takes, parameters a JSON Schema object (none: no parameters)."""
    specs: dict[str, ToolSpec] = {}
    for n, tool in enumerate(run_input.tools or ()):
        if not _TOOL_NAME.fullmatch(tool.name):
            raise _Refused(400, "invalid_message", f"tools.{n}.name: 1-64 of A-Z a-z 0-9 _ -.")
        if tool.name in specs:
            raise _Refused(400, "invalid_message", f"tools.{n}.name: {tool.name} is listed twice.")
        parameters = tool.parameters
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        elif not isinstance(parameters, dict):
            raise _Refused(400, "invalid_message", f"tools.{n}.parameters: not a JSON Schema.")
        specs[tool.name] = ToolSpec(tool.name, tool.description, parameters)
    return list(specs.values())


def _results(run_input: RunAgentInput) -> dict[str, str]:
    """The frontend tool results the request brings: its trailing `tool` messages, by call."""
    results: dict[str, str] = {}
    for message in reversed(run_input.messages):
        if not isinstance(message, ToolMessage):
            break
        content = message.content
        if not isinstance(content, str):
            content = "\n".join(part.text for part in content if isinstance(part, TextPart))
        results.setdefault(
            message.tool_call_id, f"Error: {message.error}" if message.error else content
        )
    return dict(reversed(results.items()))


def _client_calls(run_input: RunAgentInput) -> tuple[str, ...]:
    """The calls of frontend tools in the client's messages (earlier streams showed them)."""
    names = {tool.name for tool in run_input.tools or ()}
    return tuple(
        call.id
        for message in run_input.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls or ()
        if call.function.name in names
    )


async def _tool_result(services: Services, live: LiveSession, results: dict[str, str]) -> None:
    """Answer the frontend tool call the paused run waits for, from the request's results;
    the others are answered as their calls ask (`_ResultsToCome`)."""
    run, pending = live.run, live.pending_input
    if run is None or pending is None:
        raise _Refused(
            409, "not_awaiting_input", "No call of an application tool waits for this result."
        )
    call_id = pending["tool_call_id"]
    if call_id not in results:
        message = f"messages: the run waits for the result of the call {call_id!r}."
        raise _Refused(409, "not_awaiting_input", message)
    content = results.pop(call_id)
    if results:  # in place before the run goes on: its next question may come at once
        _ResultsToCome(services, live, run.run_id, dict(results))
    await services.hub.answer(live, content, call_id)


class _ResultsToCome:
    """Frontend tool results a request brought for calls that ask after the one the run
    waits for: a session subscriber of its own, which answers each call as it asks. It
    outlives the request (a client may close the response once it has sent them) and ends
    with the run, or once every result is given."""

    def __init__(
        self, services: Services, live: LiveSession, run_id: str, results: dict[str, str]
    ) -> None:
        self._services, self._live, self._run_id = services, live, run_id
        self._results = results
        self._answering: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        live.subscribe(self)

    def deliver(self, text: str, seq: int | None) -> None:
        if "agent_request_input" not in text and "response_complete" not in text:
            return  # most frames: not parsed
        frame = orjson.loads(text)
        if frame.get("run_id") != self._run_id:
            return
        if frame.get("type") == "response_complete":
            self.finish(0)
            return
        call_id = frame.get("tool_call_id")
        if frame.get("update_type") == "agent_request_input" and call_id in self._results:
            task = asyncio.create_task(self._answer(call_id, self._results.pop(call_id)))
            self._answering.add(task)
            task.add_done_callback(self._answering.discard)
            if not self._results:
                self.finish(0)

    async def _answer(self, call_id: str, content: str) -> None:
        try:
            await self._services.hub.answer(self._live, content, call_id)
        except (ProtocolError, StorageError) as exc:  # answered from elsewhere, or ended
            log.info("AG-UI: the result for %s was not taken: %s", call_id, exc)

    def finish(self, code: int) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._live.unsubscribe(self)
        self._services.hub.release(self._live)

    async def wait_closed(self) -> None:
        await self._closed.wait()


async def _resume(services: Services, live: LiveSession, run_input: RunAgentInput) -> None:
    """Deliver the resume entry that answers the paused run's question or approval."""
    run = live.run
    pending = live.pending_approval or live.pending_input
    if run is None or pending is None:
        raise _Refused(409, "not_awaiting_input", "No question or approval is waiting.")
    wanted = pending["tool_call_id"]
    entry = next((e for e in run_input.resume or () if e.interrupt_id == wanted), None)
    if entry is None:
        raise _Refused(409, "unknown_tool_call", f"resume: the open interrupt is {wanted!r}.")
    hub = services.hub
    payload = entry.payload
    if live.pending_approval is not None:
        approve = entry.status == "resolved" and _approves(payload)
        reason = payload.get("reason") if isinstance(payload, dict) else None
        if isinstance(reason, str) and len(reason) > MAX_REASON_CHARS:
            raise _Refused(
                400,
                "invalid_message",
                f"resume.payload.reason: at most {MAX_REASON_CHARS} characters "
                f"(got {len(reason)}), as on /ws.",
            )
        await hub.decide(live, wanted, approve, reason if isinstance(reason, str) else None)
    elif entry.status == "cancelled":
        await hub.stop(live)
    else:
        if isinstance(payload, dict) and isinstance(payload.get("answer"), str):
            payload = payload["answer"]
        text = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
        await hub.answer(live, text, wanted)


def _approves(payload: Any) -> bool:
    """A resolved approval's payload: `true`, `{"approve": bool}` or the `{"approved": bool}`
    AG-UI's own examples use; anything else is refused rather than read as a no."""
    if isinstance(payload, bool):
        return payload
    if isinstance(payload, dict):
        for key in ("approve", "approved"):
            if isinstance(payload.get(key), bool):
                return bool(payload[key])
    raise _Refused(
        400,
        "invalid_message",
        'resume.payload: {"approve": true|false, "reason"?: "..."} (or true / false).',
    )


async def agui_endpoint(request: Request) -> Response:
    services: Services = request.app.state.services
    live: LiveSession | None = None
    stream: _Stream | None = None
    try:
        scope = _caller(request, services)
        run_input = await _read_input(request, services.settings.server.max_message_bytes)
        create = _may_create(services, scope, run_input)
        if create:  # refused before the thread is made, as _may_create's refusals are
            await services.hub.check_storage(scope)
        live = await _open(services, scope, run_input.thread_id, create)
        server = services.settings.server
        stream = _Stream(server.outbound_queue_size, server.outbound_queue_bytes)
        live.subscribe(stream)
        results = _results(run_input)
        brought = frozenset(results)
        run_id, step = await _begin(services, live, run_input, results)
    except (_Refused, ProtocolError, StorageError) as exc:
        return _refusal(request, services, live, stream, exc, "The change could not be saved.")
    names = frozenset(t.name for t in run_input.tools or ())
    translator = Translator(
        run_input.thread_id,  # the client's own, which the session's id may not be
        run_id,
        names,
        client_calls=_client_calls(run_input),
        resolved=frozenset(
            m.tool_call_id for m in run_input.messages if isinstance(m, ToolMessage)
        ),
        brought=brought,
    )
    body = _events(services, live, stream, translator, step)
    response = StreamingResponse(body, media_type=EventEncoder().get_content_type())
    response.headers.update(_SSE_HEADERS)
    return _cors(request, response)


def _refusal(
    request: Request,
    services: Services,
    live: LiveSession | None,
    stream: _Stream | None,
    exc: Exception,
    storage_failed: str,
) -> Response:
    """A request refused (or failed) before its stream began: let go of the session and
    answer with the error; `storage_failed` says what a store failure stopped."""
    if live is not None:
        if stream is not None:
            live.unsubscribe(stream)
        services.hub.release(live)
    if isinstance(exc, ProtocolError):
        exc = _Refused(_STATUS.get(exc.code, 400), exc.code, exc.message)
    elif isinstance(exc, StorageError):
        exc = _Refused(503, "storage_error", storage_failed)
    assert isinstance(exc, _Refused)
    return _cors(request, _json({"code": exc.code, "message": exc.message}, exc.status))


async def _begin(
    services: Services, live: LiveSession, run_input: RunAgentInput, results: dict[str, str]
) -> tuple[str, int]:
    """Start the run, or continue the paused one; return (run_id, the step it is in).
    `results` loses the frontend tool result it delivers now."""
    last = run_input.messages[-1] if run_input.messages else None
    entries = run_input.resume or []
    pending = live.pending_approval or live.pending_input or {}
    paused_on = pending.get("tool_call_id")
    # A new user message after cancelling the open interrupts, or instead of the result of a
    # frontend tool (whose AG-UI run ended in success): the paused run is given up, and the
    # message starts a new one. (Cancelling an interrupt no longer open is the same.)
    # A client that sends its whole history sends, with a bare cancel, the message that
    # started the paused run as its last: that one is no new message.
    moves_on = (
        isinstance(last, UserMessage)
        and all(e.status == "cancelled" for e in entries)
        and not _started_the_run(live, run_input)
    )
    if moves_on:
        if (
            live.run is not None
            and paused_on is not None
            and (
                paused_on in {e.interrupt_id for e in entries}
                or (not entries and paused_on in _client_calls(run_input))
            )
        ):
            await _abandon(services, live)
    elif entries or isinstance(last, ToolMessage):
        step = int(pending.get("step") or 0)
        if isinstance(last, ToolMessage) and not entries:
            await _tool_result(services, live, results)
        else:
            await _resume(services, live, run_input)
        if live.run is None:
            raise _Refused(409, "not_awaiting_input", "The run has already ended.")
        return live.run.run_id, step
    if live.run is not None and paused_on is not None:
        raise _Refused(  # more precise than run_in_progress: the run waits for this client
            409,
            "run_in_progress",
            f"The run is paused on the interrupt {paused_on!r}: resume it (an answer, or "
            "status 'cancelled' with a new message) or POST /agui/{threadId}/stop first.",
        )
    frame = _chat_frame(run_input)
    check_echo_fits(frame, live.session_id, services.settings.server.max_message_bytes)
    run_id = await services.hub.start_run(live, frame, client_tools=_client_tools(run_input))
    if live.run is not None and live.run.run_id == run_id and last is not None:
        live.run.opened(last.id)  # how a later request tells this message from a new one
    return run_id, 0


def _started_the_run(live: LiveSession, run_input: RunAgentInput) -> bool:
    """Is the request's last message the one that started the session's run? By the
    client's message id when the run came from AG-UI, else by its text."""
    run, last = live.run, run_input.messages[-1]
    if run is None:
        return False
    if run.opened_by is not None:
        return last.id == run.opened_by
    return run.content == _user_text(run_input)


async def _abandon(services: Services, live: LiveSession) -> None:
    """Stop the paused run and wait (bounded) until it has ended, so a new one may start."""
    run = live.run
    if run is None:
        return
    await services.hub.stop(live)
    if run.task is not None:
        await asyncio.wait({run.task}, timeout=_ABANDON_WAIT_S)


def _cors(request: Request, response: Response) -> Response:
    """Let an allowed browser Origin read the answer; a refused one (403) may not read even
    the refusal (its page learns nothing: not the error, not that the server is there)."""
    origin = request.headers.get("origin")
    services: Services = request.app.state.services
    if origin is not None and services.auth.origin_allowed(origin):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
    return response


async def preflight(request: Request) -> Response:
    """CORS preflight of a browser front end on another allowed origin."""
    services: Services = request.app.state.services
    if not services.auth.origin_allowed(request.headers.get("origin")):
        return Response(status_code=403)
    response = Response(status_code=204)
    response.headers.update(
        {
            "Access-Control-Allow-Methods": "POST",
            "Access-Control-Allow-Headers": "authorization, content-type, accept",
            "Access-Control-Max-Age": "600",
        }
    )
    return _cors(request, response)


async def _events(
    services: Services, live: LiveSession, stream: _Stream, translator: Translator, step: int
) -> AsyncIterator[str]:
    encoder = EventEncoder()

    def encode(events: list[BaseEvent]) -> str:
        return "".join(encoder.encode(event) for event in events)

    try:
        yield encode(translator.start(step))
        async for text in _follow(stream, translator, encode):
            yield text
    finally:
        live.unsubscribe(stream)
        stream.closed()
        services.hub.release(live)


async def _follow(
    stream: _Stream,
    translator: Translator,
    encode: Callable[[list[BaseEvent]], str],
    after_seq: int = 0,
) -> AsyncIterator[str]:
    """The run's live frames, translated, until it ends or the stream does; a comment line
    while nothing comes. Frames of other runs, and those up to `after_seq` (already shown),
    are left out."""
    while not translator.done:
        try:
            async with asyncio.timeout(_KEEPALIVE_S):
                text = await stream.next()
        except TimeoutError:
            yield _KEEPALIVE  # a run thinking quietly, a question waiting, text held
            continue
        if text is None:
            message = f"The stream ended: {stream.why()}."
            yield encode([RunErrorEvent(message=message, code="stream_closed")])
            return
        frame = orjson.loads(text)
        seq = frame.get("seq")
        if frame.get("run_id") != translator.run_id or (isinstance(seq, int) and seq <= after_seq):
            continue
        out = translator.translate(frame)
        if out:
            yield encode(out)


async def stop_endpoint(request: Request) -> Response:
    """Stop the thread's run, as `agent_control stop` does on /ws."""
    services: Services = request.app.state.services
    try:
        scope = _caller(request, services)
        run_id = await _stop(services, scope, str(request.path_params["thread_id"]))
    except _Refused as exc:
        return _cors(request, _json({"code": exc.code, "message": exc.message}, exc.status))
    return _cors(request, _json({"status": "stopping", "run_id": run_id}, 202))


async def _stop(services: Services, scope: Scope, thread_id: str) -> str:
    session_id = await _session_id(services, scope, thread_id)
    try:
        live, _ = await services.hub.open(scope, session_id)
    except ProtocolError as exc:
        raise _Refused(404, exc.code, exc.message) from None
    except StorageError:
        raise _Refused(503, "storage_error", "The store is unavailable.") from None
    try:
        await services.hub.stop(live)
        return live.run.run_id if live.run is not None else ""  # "": stopped in another process
    except ProtocolError as exc:
        raise _Refused(409, exc.code, exc.message) from None
    finally:
        services.hub.release(live)
