"""An AG-UI `RunAgentInput` read and translated into what our runs take: the user's message
as a `ChatFrame`, the frontend tools as `ToolSpec`s, the tool results and resume payloads as
answers. Everything the client sent that cannot be read is `Refused` here, before anything
is stored. docs/ag-ui.md is the contract.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from ag_ui.core import AssistantMessage, RunAgentInput, TextPart, ToolMessage, UserMessage
from pydantic import ValidationError
from starlette.requests import Request

from agent.ports import ToolSpec
from agent.validation import describe_errors
from server.agui_http import Refused
from server.protocol import ChatFrame
from server.request_body import BodyError, read_body

__all__ = [
    "approves",
    "chat_frame",
    "client_calls",
    "client_tools",
    "read_input",
    "results",
    "user_text",
]

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what OpenAI-compatible servers accept
_MOST_ITEMS = {"messages": 10_000, "tools": 1_024, "context": 1_024, "resume": 1_024}
_MOST_PARTS = 1_024  # of one message's content


async def read_input(request: Request, limit: int) -> RunAgentInput:
    """The request's RunAgentInput, its body at most `limit` bytes."""
    try:
        body = await read_body(request, limit)
    except BodyError as exc:
        raise Refused(413 if exc.too_large else 400, "invalid_message", exc.message) from None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Refused(400, "invalid_message", f"The body is not valid JSON: {exc}.") from None
    _check_counts(data)
    try:
        return RunAgentInput.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(describe_errors(exc, root="body"))
        raise Refused(400, "invalid_message", f"Not a RunAgentInput: {problems}.") from None


def _check_counts(data: object) -> None:
    """Refuse lists longer than any client sends before validating them: validation costs
    per item, and a 1 MiB body of 400,000 wrong items would cost a second of the event loop."""
    if not isinstance(data, dict):
        return
    for key, most in _MOST_ITEMS.items():
        items = data.get(key)
        if isinstance(items, list) and len(items) > most:
            raise Refused(400, "invalid_message", f"{key}: at most {most} (got {len(items)}).")
    messages = data.get("messages")
    for n, message in enumerate(messages if isinstance(messages, list) else ()):
        parts = message.get("content") if isinstance(message, dict) else None
        if isinstance(parts, list) and len(parts) > _MOST_PARTS:
            raise Refused(
                400,
                "invalid_message",
                f"messages.{n}.content: at most {_MOST_PARTS} parts (got {len(parts)}).",
            )


def user_text(run_input: RunAgentInput) -> str:
    """The last message, which must be the user's: the run's request. Earlier messages are
    the client's copy; the history the model sees is the stored one."""
    last = run_input.messages[-1] if run_input.messages else None
    if not isinstance(last, UserMessage):
        raise Refused(400, "invalid_message", "messages: the last message must be the user's.")
    content = last.content
    if not isinstance(content, str):
        content = "\n".join(part.text for part in content if isinstance(part, TextPart))
    context = run_input.context or []
    if context:  # ambient information from the client goes to the model with the request
        lines = "\n".join(f"- {item.description}: {item.value}" for item in context)
        content = f"{content}\n\n[Context from the application]\n{lines}"
    return str(content)


def chat_frame(run_input: RunAgentInput) -> ChatFrame:
    """The `chat` a `/ws` client would send for the request's user message."""
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    fields = {k: props[k] for k in ("agent_mode", "agent_max_steps", "tools") if k in props}
    content = user_text(run_input)
    if not content.strip():  # as for a `chat` on /ws
        parts = run_input.messages[-1].content
        if isinstance(parts, list) and any(not isinstance(p, TextPart) for p in parts):
            message = "messages: only text parts are read, and this message has none."
        else:
            message = "messages: the user's message is empty."
        raise Refused(400, "invalid_message", message)
    try:
        return ChatFrame.model_validate({"type": "chat", "content": content, **fields})
    except ValidationError as exc:
        problems = "; ".join(describe_errors(exc, root="forwardedProps"))
        raise Refused(400, "invalid_message", f"forwardedProps: {problems}.") from None


def client_tools(run_input: RunAgentInput) -> list[ToolSpec]:
    """The frontend tools, as the model will see them: each name once, one the model's server
    takes, parameters a JSON Schema object (none: no parameters)."""
    specs: dict[str, ToolSpec] = {}
    for n, tool in enumerate(run_input.tools or ()):
        if not _TOOL_NAME.fullmatch(tool.name):
            raise Refused(400, "invalid_message", f"tools.{n}.name: 1-64 of A-Z a-z 0-9 _ -.")
        if tool.name in specs:
            raise Refused(400, "invalid_message", f"tools.{n}.name: {tool.name} is listed twice.")
        parameters = tool.parameters
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        elif not isinstance(parameters, dict):
            raise Refused(400, "invalid_message", f"tools.{n}.parameters: not a JSON Schema.")
        specs[tool.name] = ToolSpec(tool.name, tool.description, parameters)
    return list(specs.values())


def results(run_input: RunAgentInput) -> dict[str, str]:
    """The frontend tool results the request brings: its trailing `tool` messages, by call."""
    found: dict[str, str] = {}
    for message in reversed(run_input.messages):
        if not isinstance(message, ToolMessage):
            break
        content = message.content
        if not isinstance(content, str):
            content = "\n".join(part.text for part in content if isinstance(part, TextPart))
        found.setdefault(
            message.tool_call_id, f"Error: {message.error}" if message.error else content
        )
    return dict(reversed(found.items()))


def client_calls(run_input: RunAgentInput) -> tuple[str, ...]:
    """The calls of frontend tools in the client's messages (earlier streams showed them)."""
    names = {tool.name for tool in run_input.tools or ()}
    return tuple(
        call.id
        for message in run_input.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls or ()
        if call.function.name in names
    )


def approves(payload: Any) -> bool:
    """A resolved approval's payload: `true`, `{"approve": bool}` or the `{"approved": bool}`
    AG-UI's own examples use; anything else is refused rather than read as a no."""
    if isinstance(payload, bool):
        return payload
    if isinstance(payload, dict):
        for key in ("approve", "approved"):
            if isinstance(payload.get(key), bool):
                return bool(payload[key])
    raise Refused(
        400,
        "invalid_message",
        'resume.payload: {"approve": true|false, "reason"?: "..."} (or true / false).',
    )
