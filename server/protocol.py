"""The wire protocol (docs/wire-protocol.md): outbound frames from agent events, inbound parsing.

Inbound frames are validated strictly (nothing is coerced); every failure maps to one of the
protocol's error codes with a message that says what was expected and what arrived. The
table that makes an event's frame is read backwards too (`agent_event`): a stored frame
decodes into the event it was made of (server/storage/frames.py).
"""

from __future__ import annotations

import types
from dataclasses import MISSING, dataclass, fields
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from agent.events import AgentEvent, RunStopped, UserMessage
from agent.run import Style
from agent.validation import describe_errors, quoted

__all__ = [
    "MAX_REASON_CHARS",
    "MAX_WHOLE_NUMBER",
    "AgentControlFrame",
    "ChatFrame",
    "ClientFrame",
    "ProtocolError",
    "SelectVersionFrame",
    "ToolDecisionFrame",
    "UserInputFrame",
    "agent_event",
    "check_echo_fits",
    "error_frame",
    "event_frame",
    "fitted",
    "frame_kind",
    "parse_client_frame",
    "run_frame",
    "whole_number",
]

ErrorCode = Literal[
    "invalid_json",
    "unknown_type",
    "invalid_message",
    "run_in_progress",
    "too_many_runs",
    "no_active_run",
    "not_awaiting_input",
    "not_awaiting_approval",
    "unknown_tool_call",
    "already_decided",
    "session_not_found",
    "nothing_to_retry",
    "llm_error",
    "storage_error",
    "internal_error",
    "rate_limited",
    "storage_unavailable",
    "storage_quota_exceeded",
    "unknown_run",
]

MAX_WHOLE_NUMBER = 2**63 - 1  # what SQLite and MongoDB store as an integer
MAX_TOOLS = 1024  # names in a `chat`'s `tools`: checked before its items, whatever their number


def whole_number(raw: str) -> int | None:
    """`raw` as an int when it is ASCII digits only and at most 2**63 - 1, else None.

    (`str.isdigit` also accepts "²", "①" and Arabic-Indic digits; `int` accepts some.)
    """
    if not raw or len(raw) > 19 or not (raw.isascii() and raw.isdigit()):
        return None
    value = int(raw)
    return value if value <= MAX_WHOLE_NUMBER else None


RUN_TIMEOUT_MESSAGE = "The run took longer than its time limit and was ended."


class ProtocolError(Exception):
    """A client frame that cannot be served; becomes an `error` frame that echoes the
    frame's `id` when it had one."""

    def __init__(self, code: ErrorCode, message: str, frame_id: str | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.frame_id = frame_id

    def frame(self) -> dict[str, Any]:
        return error_frame(self.code, self.message, self.frame_id)


FrameId = Annotated[StrictStr, Field(min_length=1, max_length=128)]


MAX_REASON_CHARS = 2000  # of a denial's reason: the model, the store and every tab read it


class _Frame(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    id: FrameId | None = None  # echoed on the error that answers this frame


class ChatFrame(_Frame):
    type: Literal["chat"]
    content: Annotated[StrictStr, Field(min_length=1)]
    agent_mode: StrictBool | None = None
    agent_max_steps: Annotated[StrictInt, Field(ge=1)] | None = None
    tools: Annotated[list[StrictStr], Field(max_length=MAX_TOOLS)] | None = None
    agent_style: Style | None = None
    # A run this one replaces, as a new version of its turn (docs/wire-protocol.md).
    replaces: Annotated[StrictStr, Field(min_length=1, max_length=128)] | None = None


class AgentControlFrame(_Frame):
    """`stop`; or `retry` (run the last user message again) and `continue` (go on after
    the step limit), which start a run like `chat` does."""

    type: Literal["agent_control"]
    action: Literal["stop", "retry", "continue"]
    agent_max_steps: Annotated[StrictInt, Field(ge=1)] | None = None


class UserInputFrame(_Frame):
    type: Literal["agent_user_input"]
    content: StrictStr
    tool_call_id: StrictStr | None = None  # the question meant; None: whichever is waiting


class ToolDecisionFrame(_Frame):
    type: Literal["agent_tool_decision"]
    tool_call_id: Annotated[StrictStr, Field(min_length=1)]
    approve: StrictBool
    reason: Annotated[StrictStr, Field(max_length=MAX_REASON_CHARS)] | None = None


class SelectVersionFrame(_Frame):
    """Show `run_id`'s version of its turn (and below it, what was shown there last)."""

    type: Literal["select_version"]
    run_id: Annotated[StrictStr, Field(min_length=1, max_length=128)]


ClientFrame = (
    ChatFrame | AgentControlFrame | UserInputFrame | ToolDecisionFrame | SelectVersionFrame
)
_FRAMES: dict[str, type[_Frame]] = {
    "chat": ChatFrame,
    "agent_control": AgentControlFrame,
    "agent_user_input": UserInputFrame,
    "agent_tool_decision": ToolDecisionFrame,
    "select_version": SelectVersionFrame,
}


def parse_client_frame(raw: str | bytes) -> ClientFrame:
    """Parse one inbound frame or raise ProtocolError."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError("invalid_json", f"The frame is not valid JSON: {exc}.") from None
    if not isinstance(data, dict):
        raise ProtocolError(
            "invalid_json", f"A frame must be a JSON object, got {_json_type(data)}."
        )
    given = data.get("id")
    frame_id = given if isinstance(given, str) and 0 < len(given) <= 128 else None
    kind = data.get("type")
    model = _FRAMES.get(kind) if isinstance(kind, str) else None
    if model is None:  # checked before the other fields, `id` among them
        expected = ", ".join(_FRAMES)
        got = "no type" if "type" not in data else f"type {quoted(kind)}"
        raise ProtocolError("unknown_type", f"Expected a type of {expected}; got {got}.", frame_id)
    try:
        frame = model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError("invalid_message", _describe(exc), frame_id) from None
    if isinstance(frame, ChatFrame) and not frame.content.strip():
        raise ProtocolError(
            "invalid_message", "content: must not be empty or only white space.", frame_id
        )
    return frame  # type: ignore[return-value]


def check_echo_fits(frame: ChatFrame, session_id: str, limit: int) -> None:
    """Refuse a `chat` whose echo, `agent_user_message`, would be a frame over `limit`.

    The echo carries the content with the run's envelope, so a `content` within a few hundred
    bytes of the inbound limit makes a frame over it: a client library that accepts frames as
    large as it may send (`websockets`' default 1 MiB is the server's default limit) closes
    on it, and again on every replay.
    """
    if len(frame.content) * 6 + 2048 <= limit:  # a character is at most 6 bytes as JSON
        return
    parent = "0" * 32  # a run id
    echo = UserMessage("", False, "continue", frame.id, parent, frame.replaces, True)  # longest
    envelope = len(orjson.dumps(event_frame(echo, session_id, "0" * 32, 10**13)))
    envelope += len(str(MAX_WHOLE_NUMBER)) - 1  # `seq`, 0 until the store numbers it
    room = limit - envelope
    size = len(orjson.dumps(frame.content)) - 2  # its quotes are in the envelope's ""
    if size > room:
        raise ProtocolError(
            "invalid_message",
            f"content: {size} bytes as JSON, at most {room} here: its echo "
            f"(agent_user_message) must fit in one frame of {limit} bytes "
            "(server.max_message_bytes).",
            frame.id,
        )


def _describe(exc: ValidationError) -> str:
    return "; ".join(describe_errors(exc, root="frame")) + "."


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def error_frame(code: ErrorCode, message: str, frame_id: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if frame_id is not None:
        frame["id"] = frame_id
    return frame


@dataclass(frozen=True, slots=True)
class _Shape:
    type: str
    update_type: str | None
    fields: tuple[tuple[str, str], ...]  # (wire name, event attribute)


_SHAPES: dict[str, _Shape] = {
    "run_started": _Shape("agent_update", "agent_start", (("max_steps", "max_steps"),)),
    "step_started": _Shape("agent_update", "agent_turn_start", (("step", "step"),)),
    "reason_delta": _Shape(
        "agent_update", "agent_reason_delta", (("step", "step"), ("delta", "delta"))
    ),
    "reason_done": _Shape(
        "agent_update", "agent_reason", (("step", "step"), ("content", "content"))
    ),
    "input_requested": _Shape(
        "agent_update",
        "agent_request_input",
        (
            ("step", "step"),
            ("question", "question"),
            ("tool_call_id", "call_id"),
            ("tool_name", "tool_name"),
            ("expires_at", "expires_at"),
        ),
    ),
    "approval_requested": _Shape(
        "agent_update",
        "agent_tool_approval",
        (
            ("step", "step"),
            ("tool_call_id", "call_id"),
            ("tool_name", "name"),
            ("arguments", "arguments"),
            ("expires_at", "expires_at"),
        ),
    ),
    "approval_timed_out": _Shape(
        "agent_update",
        "agent_tool_approval_timeout",
        (("step", "step"), ("tool_call_id", "call_id")),
    ),
    "input_timed_out": _Shape("agent_update", "agent_request_input_timeout", (("step", "step"),)),
    "observe_delta": _Shape(
        "agent_update", "agent_observe_delta", (("step", "step"), ("delta", "delta"))
    ),
    "observe_done": _Shape(
        "agent_update", "agent_observe", (("step", "step"), ("content", "content"))
    ),
    "run_stopped": _Shape(
        "agent_update",
        "agent_stopped",
        (("step", "step"), ("reason", "reason"), ("usage", "usage")),
    ),
    "context_trimmed": _Shape(
        "agent_update",
        "agent_context",
        (
            ("step", "step"),
            ("phase", "phase"),
            ("tokens", "tokens"),
            ("budget", "budget"),
            ("exact", "exact"),
            ("compressed", "compressed"),
            ("dropped_messages", "dropped_messages"),
            ("collapsed_steps", "collapsed_steps"),
            ("dropped_steps", "dropped_steps"),
        ),
    ),
    "research_done": _Shape(
        "agent_update",
        "agent_research",
        (("query", "query"), ("summary", "summary"), ("sources", "sources")),
    ),
    "plan_made": _Shape("agent_update", "agent_plan", (("step", "step"), ("plan", "plan"))),
    "finish_verified": _Shape(
        "agent_update",
        "agent_verify",
        (("step", "step"), ("done", "done"), ("reason", "reason")),
    ),
    "run_completed": _Shape(
        "agent_update",
        "agent_completion",
        (
            ("steps", "steps"),
            ("final_answer", "final_answer"),
            ("stop_reason", "stop_reason"),
            ("usage", "usage"),
        ),
    ),
    "tool_started": _Shape(
        "tool_start",
        None,
        (
            ("step", "step"),
            ("tool_call_id", "call_id"),
            ("tool_name", "name"),
            ("arguments", "arguments"),
        ),
    ),
    "tool_completed": _Shape(
        "tool_complete",
        None,
        (
            ("step", "step"),
            ("tool_call_id", "call_id"),
            ("tool_name", "name"),
            ("result", "result"),
            ("duration_ms", "duration_ms"),
        ),
    ),
    "tool_failed": _Shape(
        "tool_error",
        None,
        (("step", "step"), ("tool_call_id", "call_id"), ("tool_name", "name"), ("error", "error")),
    ),
    "chat_delta": _Shape("chat_delta", None, (("delta", "delta"),)),
    "chat_done": _Shape("chat_response", None, (("content", "content"), ("usage", "usage"))),
    "user_message": _Shape(
        "agent_update",
        "agent_user_message",
        (("content", "content"), ("agent_mode", "agent_mode"), ("origin", "origin")),
    ),
    "user_answered": _Shape(
        "agent_update",
        "agent_user_answer",
        (("step", "step"), ("tool_call_id", "call_id"), ("content", "content")),
    ),
    "answer_delta": _Shape(
        "agent_update", "agent_answer_delta", (("step", "step"), ("delta", "delta"))
    ),
    "thinking_delta": _Shape(
        "agent_update",
        "agent_reasoning_delta",
        (("step", "step"), ("phase", "phase"), ("delta", "delta")),
    ),
    "model_retrying": _Shape(
        "agent_update",
        "agent_llm_retry",
        (
            ("step", "step"),
            ("phase", "phase"),
            ("attempt", "attempt"),
            ("max_attempts", "max_attempts"),
            ("reason", "reason"),
            ("delay_ms", "delay_ms"),
        ),
    ),
}


def run_frame(
    kind: str, session_id: str, run_id: str, ts: int, update_type: str | None = None
) -> dict[str, Any]:
    """The envelope every run event carries; `seq` is filled in by the store."""
    frame: dict[str, Any] = {"type": kind}
    if update_type is not None:
        frame["update_type"] = update_type
    frame.update(session_id=session_id, run_id=run_id, seq=0, ts=ts)
    return frame


def event_frame(event: AgentEvent, session_id: str, run_id: str, ts: int) -> dict[str, Any]:
    """The wire frame for an internal event (without its final `seq`).

    A run ended by the wall-clock limit has no `agent_stopped` reason in docs/wire-protocol.md;
    it is reported as an `internal_error` that says so, with the run's usage.
    """
    if isinstance(event, RunStopped) and event.reason == "run_timeout":
        return {
            **run_frame("error", session_id, run_id, ts),
            **error_frame("internal_error", RUN_TIMEOUT_MESSAGE),
            "usage": event.usage,
        }
    shape = _SHAPES[event.kind]
    frame = run_frame(shape.type, session_id, run_id, ts, shape.update_type)
    for wire, attr in shape.fields:
        frame[wire] = getattr(event, attr)
    if isinstance(event, UserMessage):
        if event.client_id is not None:
            frame["id"] = event.client_id
        if event.versioned:  # versions of a turn: null for a session's first run
            frame["parent_run_id"] = event.parent_run_id
        if event.replaces is not None:
            frame["replaces"] = event.replaces
    return frame


def frame_kind(event: AgentEvent) -> str:
    """What `event`'s frame says happened: its `update_type`, else its `type`."""
    if isinstance(event, RunStopped) and event.reason == "run_timeout":
        return "error"
    shape = _SHAPES[event.kind]
    return shape.update_type or shape.type


# The reverse of `event_frame`, from the same table: (type, update_type) -> event class, shape.
_KINDS = {
    next(f.default for f in fields(cls) if f.name == "kind"): cls for cls in get_args(AgentEvent)
}
_BY_WIRE: dict[tuple[str, str | None], tuple[type[Any], _Shape]] = {
    (shape.type, shape.update_type): (_KINDS[kind], shape) for kind, shape in _SHAPES.items()
}


def agent_event(frame: dict[str, Any]) -> AgentEvent | None:
    """The agent event `frame` was built from by `event_frame`; None for a frame that is no
    agent event's (the server's own: `error`, `response_complete`...), or one whose fields
    do not fit the event (damaged, or written by another program)."""
    kind, update = frame.get("type"), frame.get("update_type")
    if not isinstance(kind, str) or not isinstance(update, str | None):
        return None
    found = _BY_WIRE.get((kind, update if kind == "agent_update" else None))
    if found is None:
        return None
    cls, shape = found
    values = {attr: frame[wire] for wire, attr in shape.fields if wire in frame}
    if cls is UserMessage:
        values.update(
            client_id=frame.get("id"),
            parent_run_id=frame.get("parent_run_id"),
            replaces=frame.get("replaces"),
            versioned="parent_run_id" in frame,
        )
    return fitted(cls, values)


T = TypeVar("T")


def fitted(cls: type[T], values: dict[str, Any]) -> T | None:
    """`cls` (a dataclass) made of `values` read from JSON, or None when one is missing or of
    the wrong type. Arrays become the tuples the class holds; a `Literal` takes any string
    (a newer server may add a value, which is no reason to lose the event)."""
    hints = _hints(cls)
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in values:
            if f.default is MISSING and f.default_factory is MISSING:
                return None
            continue
        value = values[f.name]
        if not _fits(value, hints[f.name]):
            return None
        if isinstance(value, list) and get_origin(hints[f.name]) is tuple:
            values[f.name] = tuple(value)
    return cls(**values)


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """`cls`'s field types, resolved once."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    return hints


def _fits(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return isinstance(value, str) or value in get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in get_args(hint))
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, list | tuple)
    if origin is list:
        return isinstance(value, list)
    return isinstance(value, origin or hint)
