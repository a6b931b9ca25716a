"""AG-UI reconnect: `POST /agui/connect` brings a front end that reloaded back into an
existing thread (what `AbstractAgent.connectAgent` asks of an agent's `connect`).

The stream: RUN_STARTED, MESSAGES_SNAPSHOT (the conversation as stored, in the versions of
its turns that are shown: the user's messages, the answers, tool calls and their results),
then, when a run is going on, that run from its first event, translated as `POST /agui`
streams it, and on live until it ends or pauses on a question (RUN_FINISHED as there); with
no run, RUN_FINISHED at once. A question the run asked and was answered is not shown again as
an interrupt: only one still open ends the stream. docs/ag-ui.md is the contract.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    MessagesSnapshotEvent,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from starlette.requests import Request
from starlette.responses import Response

from agent import events as agent_events
from agent.errors import StorageError
from server.agui_events import Translator
from server.agui_http import Refused, caller, open_thread, refusal, sse_response
from server.agui_input import read_input
from server.agui_stream import Stream, encode, follow, open_stream, served
from server.events import Event
from server.live import LiveSession
from server.services import Services
from server.storage.base import Scope, SessionStatus
from server.storage.search import ANSWER_PHASES
from server.versions import on_path

__all__ = ["connect_endpoint"]

_INTERRUPTS = (agent_events.InputRequested, agent_events.ApprovalRequested)
_HISTORY_LIMIT = 100_000  # messages in a snapshot: every one a thread has, in practice


async def connect_endpoint(request: Request) -> Response:
    services: Services = request.app.state.services
    live: LiveSession | None = None
    stream: Stream | None = None
    try:
        scope = caller(request, services)
        run_input = await read_input(request, services.settings.server.max_message_bytes)
        live = await open_thread(services, scope, run_input.thread_id, create=False)
        stream = open_stream(services, live)  # before reading the store: nothing falls between
        running = live.status != SessionStatus.IDLE
        events = await _last_run(services, scope, live.session_id) if running else []
        messages = await _snapshot(services, scope, live.session_id, events)
    except (Refused, StorageError) as exc:
        return refusal(request, services, live, stream, exc, "The store is unavailable.")
    run_id = str(events[0].run_id) if events else run_input.run_id
    client_tools = frozenset(t.name for t in run_input.tools or ())
    translator = Translator(run_input.thread_id, run_id, client_tools)
    body = _events(stream, translator, messages, events)
    return sse_response(request, served(services, live, stream, body))


async def _last_run(services: Services, scope: Scope, session_id: str) -> list[Event]:
    """The stored events of the session's last run (the one going on), oldest first."""
    events: list[Event] = []
    async for page in services.hub.stored.decoded(scope, session_id, 0):
        for event in page:
            if isinstance(event.event, agent_events.UserMessage):
                events = []  # a run begins with its user's message
            if event.run_id:
                events.append(event)
    return events


async def _snapshot(
    services: Services, scope: Scope, session_id: str, running: list[Event]
) -> list[Message]:
    """The stored conversation as AG-UI messages; of the run going on only its user's
    message (the stream shows the rest of it)."""
    stored = await services.hub.stored.last_messages(scope, session_id, _HISTORY_LIMIT)
    tree = await services.hub.stored.tree(scope, session_id)
    stored = on_path(tree, stored, lambda body: body.get("run_id"))  # the versions shown
    run_id = running[0].run_id if running else None
    out: list[Message] = []
    for body in stored:
        if run_id is not None and body.get("run_id") == run_id and body["role"] != "user":
            continue
        message = _message(body)
        if message is not None:
            out.append(message)
    return out


def _message(body: dict[str, Any]) -> Message | None:
    """One stored message (its API dict) as AG-UI's; None for what a chat does not show
    (the agent's working notes, system notes)."""
    role, content, key = body["role"], str(body.get("content") or ""), str(body["message_id"])
    if role == "user" and body.get("phase") is None:
        return UserMessage(id=key, content=content)
    if role == "tool":
        return ToolMessage(id=key, tool_call_id=str(body.get("tool_call_id")), content=content)
    if role != "assistant":
        return None
    calls = [
        ToolCall(id=c["id"], function=FunctionCall(name=c["name"], arguments=c["arguments"]))
        for c in body.get("tool_calls") or ()
    ]
    if calls:
        return AssistantMessage(id=key, content=content or None, tool_calls=calls)
    if body.get("phase") in ANSWER_PHASES:
        return AssistantMessage(id=key, content=content)
    return None


async def _events(
    stream: Stream,
    translator: Translator,
    messages: list[Message],
    events: list[Event],
) -> AsyncGenerator[str, None]:
    started = RunStartedEvent(thread_id=translator.thread_id, run_id=translator.run_id)
    yield encode([started, MessagesSnapshotEvent(messages=messages)])
    if not events:
        finished = RunFinishedEvent(
            thread_id=translator.thread_id,
            run_id=translator.run_id,
            outcome=RunFinishedSuccessOutcome(),
        )
        yield encode([finished])
        return
    last_seq = 0
    for i, event in enumerate(events):
        last_seq = event.seq or last_seq
        answered = i + 1 < len(events)  # a question the run went on from
        if isinstance(event.event, _INTERRUPTS) and answered:
            continue
        yield encode(translator.translate(event))
    async for text in follow(stream, translator, last_seq):
        yield text
