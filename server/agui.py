"""The AG-UI endpoint: `POST /agui` (a RunAgentInput, answered by server-sent events) and
`POST /agui/{thread_id}/stop`. docs/ag-ui.md is the contract; server/agui_events.py the
mapping from our wire frames to AG-UI events.

A request attaches to its session like a `/ws` connection (same auth, Origin rule, session
registry and live events), starts a run (or resumes the paused one) and streams that run's
frames, translated, until the run ends or pauses on a question. Closing the request does not
stop the run; `POST /agui/{thread_id}/stop` does. A thread id is the caller's own: the
session it names is found by server/agui_threads.py. server/app.py routes both here, and
imports this module (with the AG-UI SDK) on the first request.

This module translates only: the request is read by server/agui_input.py, its HTTP edge
(caller, CORS, refusals) is server/agui_http.py, its stream server/agui_stream.py, and the
run it starts, answers, abandons or stops is the session hub's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import orjson
from ag_ui.core import RunAgentInput, ToolMessage, UserMessage
from starlette.requests import Request
from starlette.responses import Response

from agent.errors import StorageError
from server import agui_input as read
from server.agui_events import Translator
from server.agui_http import (
    Refused,
    caller,
    cors,
    json_response,
    open_thread,
    refusal,
    session_id_of,
    sse_response,
)
from server.agui_stream import KEEPALIVE_S as _KEEPALIVE_S
from server.agui_stream import Stream as _Stream
from server.agui_stream import encode, follow, open_stream, served
from server.live import LiveSession
from server.protocol import MAX_REASON_CHARS, ProtocolError, check_echo_fits
from server.services import Services
from server.storage.base import Scope

__all__ = ["agui_endpoint", "stop_endpoint"]


async def agui_endpoint(request: Request) -> Response:
    services: Services = request.app.state.services
    live: LiveSession | None = None
    stream: _Stream | None = None
    try:
        scope = caller(request, services)
        run_input = await read.read_input(request, services.settings.server.max_message_bytes)
        create = _may_create(services, scope, run_input)
        if create:  # refused before the thread is made, as _may_create's refusals are
            await services.hub.check_storage(scope)
        live = await open_thread(services, scope, run_input.thread_id, create)
        stream = open_stream(services, live)
        results = read.results(run_input)
        brought = frozenset(results)
        run_id, step = await _begin(services, live, run_input, results)
    except (Refused, ProtocolError, StorageError) as exc:
        return refusal(request, services, live, stream, exc, "The change could not be saved.")
    names = frozenset(t.name for t in run_input.tools or ())
    translator = Translator(
        run_input.thread_id,  # the client's own, which the session's id may not be
        run_id,
        names,
        client_calls=read.client_calls(run_input),
        resolved=frozenset(
            m.tool_call_id for m in run_input.messages if isinstance(m, ToolMessage)
        ),
        brought=brought,
    )
    return sse_response(request, served(services, live, stream, _events(stream, translator, step)))


async def _events(stream: _Stream, translator: Translator, step: int) -> AsyncGenerator[str, None]:
    yield encode(translator.start(step))
    async for text in follow(stream, translator, keepalive_s=_KEEPALIVE_S):
        yield text


def _may_create(services: Services, scope: Scope, run_input: RunAgentInput) -> bool:
    """Whether the request may make its thread: only one that starts a run, checked first
    (a refused request must not leave an empty conversation behind). An answer or a tool
    result is for a thread that exists."""
    last = run_input.messages[-1] if run_input.messages else None
    if run_input.resume or isinstance(last, ToolMessage):
        return False
    # Refuses what _begin would refuse, before anything is stored.
    services.hub.check_run(scope, read.chat_frame(run_input), read.client_tools(run_input))
    return True


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
                or (not entries and paused_on in read.client_calls(run_input))
            )
        ):
            await services.hub.abandon(live)
    elif entries or isinstance(last, ToolMessage):
        step = int(pending.get("step") or 0)
        if isinstance(last, ToolMessage) and not entries:
            await _tool_result(services, live, results)
        else:
            await _resume(services, live, run_input)
        if live.run is None:
            raise Refused(409, "not_awaiting_input", "The run has already ended.")
        return live.run.run_id, step
    if live.run is not None and paused_on is not None:
        raise Refused(  # more precise than run_in_progress: the run waits for this client
            409,
            "run_in_progress",
            f"The run is paused on the interrupt {paused_on!r}: resume it (an answer, or "
            "status 'cancelled' with a new message) or POST /agui/{threadId}/stop first.",
        )
    frame = read.chat_frame(run_input)
    check_echo_fits(frame, live.session_id, services.settings.server.max_message_bytes)
    run_id = await services.hub.start_run(live, frame, client_tools=read.client_tools(run_input))
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
    return run.content == read.user_text(run_input)


async def _tool_result(services: Services, live: LiveSession, results: dict[str, str]) -> None:
    """Answer the frontend tool call the paused run waits for, from the request's results;
    the others are answered as their calls ask (server/run_answers.py)."""
    run, pending = live.run, live.pending_input
    if run is None or pending is None:
        raise Refused(
            409, "not_awaiting_input", "No call of an application tool waits for this result."
        )
    call_id = pending["tool_call_id"]
    if call_id not in results:
        message = f"messages: the run waits for the result of the call {call_id!r}."
        raise Refused(409, "not_awaiting_input", message)
    content = results.pop(call_id)
    if results:  # in place before the run goes on: its next question may come at once
        services.hub.answer_when_asked(live, run.run_id, dict(results))
    await services.hub.answer(live, content, call_id)


async def _resume(services: Services, live: LiveSession, run_input: RunAgentInput) -> None:
    """Deliver the resume entry that answers the paused run's question or approval."""
    run = live.run
    pending = live.pending_approval or live.pending_input
    if run is None or pending is None:
        raise Refused(409, "not_awaiting_input", "No question or approval is waiting.")
    wanted = pending["tool_call_id"]
    entry = next((e for e in run_input.resume or () if e.interrupt_id == wanted), None)
    if entry is None:
        raise Refused(409, "unknown_tool_call", f"resume: the open interrupt is {wanted!r}.")
    hub = services.hub
    payload = entry.payload
    if live.pending_approval is not None:
        approve = entry.status == "resolved" and read.approves(payload)
        reason = payload.get("reason") if isinstance(payload, dict) else None
        if isinstance(reason, str) and len(reason) > MAX_REASON_CHARS:
            raise Refused(
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


async def stop_endpoint(request: Request) -> Response:
    """Stop the thread's run, as `agent_control stop` does on /ws."""
    services: Services = request.app.state.services
    try:
        scope = caller(request, services)
        run_id = await _stop(services, scope, str(request.path_params["thread_id"]))
    except Refused as exc:
        body = {"code": exc.code, "message": exc.message}
        return cors(request, json_response(body, exc.status))
    return cors(request, json_response({"status": "stopping", "run_id": run_id}, 202))


async def _stop(services: Services, scope: Scope, thread_id: str) -> str:
    session_id = await session_id_of(services, scope, thread_id)
    try:
        live, _ = await services.hub.open(scope, session_id)
    except ProtocolError as exc:
        raise Refused(404, exc.code, exc.message) from None
    except StorageError:
        raise Refused(503, "storage_error", "The store is unavailable.") from None
    try:
        await services.hub.stop(live)
        return live.run.run_id if live.run is not None else ""  # "": stopped in another process
    except ProtocolError as exc:
        raise Refused(409, exc.code, exc.message) from None
    finally:
        services.hub.release(live)
