"""A session's events as the server carries them: typed, in their envelope, until the edge.

A run's `AgentEvent`s, and the few events the server makes itself (a run's error and its
end, a switch of the shown version, a new title), travel in the process as an `Event`: what
happened, the session and run it belongs to, when, and once stored its `seq`. JSON is made
of it once, where it leaves the process: `draft()` is its wire frame (server/protocol.py
`event_frame`), which the store numbers and serializes, and the text it stores is what every
socket is sent. A stored event read back is decoded into the same type, once
(server/storage/frames.py), so what reads an event reads one typed value whichever way it
came, and never JSON the server built itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from agent.control import PendingApproval, PendingQuestion
from agent.events import (
    AgentEvent,
    ApprovalRequested,
    ChatDone,
    InputRequested,
    RunCompleted,
    RunStopped,
)
from server.protocol import (
    RUN_TIMEOUT_MESSAGE,
    ErrorCode,
    agent_event,
    error_frame,
    event_frame,
    fitted,
    frame_kind,
    run_frame,
)

__all__ = [
    "Event",
    "PathShown",
    "RunEnded",
    "RunFailed",
    "ServerEvent",
    "TitleChanged",
    "Unrecognized",
    "approval_of",
    "event_of",
    "question_of",
    "step_of",
    "usage_of",
]


@dataclass(frozen=True, slots=True)
class RunFailed:
    """A run's `error`: it failed, with its usage so far when the loop reported it."""

    code: ErrorCode
    message: str
    usage: dict[str, float | int] | None = None
    kind: Literal["error"] = "error"

    def frame(self, session_id: str, run_id: str | None, ts: int) -> dict[str, Any]:
        frame = {**run_frame("error", session_id, run_id or "", ts)}
        frame.update(error_frame(self.code, self.message))
        if self.usage is not None:
            frame["usage"] = self.usage
        return frame


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run's last event, `response_complete`: the session is idle again."""

    kind: Literal["response_complete"] = "response_complete"

    def frame(self, session_id: str, run_id: str | None, ts: int) -> dict[str, Any]:
        return run_frame("response_complete", session_id, run_id or "", ts)


@dataclass(frozen=True, slots=True)
class PathShown:
    """`active_path`: another version of a turn is shown (server/version_switch.py). Not a
    run's event: it has no `run_id`, so watchers never take it for a run going on."""

    selected: str
    active_path: tuple[str, ...]
    client_id: str | None = None  # the `select_version` frame's `id`
    kind: Literal["active_path"] = "active_path"

    def frame(self, session_id: str, run_id: str | None, ts: int) -> dict[str, Any]:
        frame: dict[str, Any] = {"type": "active_path", "session_id": session_id, "seq": 0}
        frame.update(ts=ts, selected=self.selected, active_path=list(self.active_path))
        if self.client_id is not None:
            frame["id"] = self.client_id
        return frame


@dataclass(frozen=True, slots=True)
class TitleChanged:
    """`session_title`: the session was named (sent to its watchers, never stored)."""

    title: str
    kind: Literal["session_title"] = "session_title"

    def frame(self, session_id: str, run_id: str | None, ts: int) -> dict[str, Any]:
        return {"type": "session_title", "session_id": session_id, "title": self.title}


@dataclass(frozen=True, slots=True)
class Unrecognized:
    """A stored frame this server does not know (a newer version's, or damaged): passed on
    as it was, and read as saying nothing but its envelope."""

    body: dict[str, Any]
    kind: Literal["unrecognized"] = "unrecognized"

    def frame(self, session_id: str, run_id: str | None, ts: int) -> dict[str, Any]:
        return dict(self.body)


ServerEvent = RunFailed | RunEnded | PathShown | TitleChanged | Unrecognized

# The server's own frames read back: type -> (event class, (wire name, attribute)...).
_SERVER_FRAMES: dict[str, tuple[type[Any], tuple[tuple[str, str], ...]]] = {
    "error": (RunFailed, (("code", "code"), ("message", "message"), ("usage", "usage"))),
    "response_complete": (RunEnded, ()),
    "active_path": (
        PathShown,
        (("selected", "selected"), ("active_path", "active_path"), ("id", "client_id")),
    ),
    "session_title": (TitleChanged, (("title", "title"),)),
}


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a session: what happened, and its envelope. `seq` is None until stored
    (and for what is sent without being stored)."""

    event: AgentEvent | ServerEvent
    session_id: str
    run_id: str | None = None
    ts: int = 0
    seq: int | None = None

    @property
    def wire_kind(self) -> str:
        """What its frame says happened: the `update_type` of an `agent_update`, else the
        frame's `type`."""
        event = self.event
        if isinstance(event, Unrecognized):
            body = event.body
            return str(body.get("update_type") or body.get("type") or "")
        if isinstance(event, RunFailed | RunEnded | PathShown | TitleChanged):
            return event.kind
        return frame_kind(event)

    def draft(self) -> dict[str, Any]:
        """Its wire frame to store: a stored kind has `seq` 0 until the store numbers it."""
        event = self.event
        if isinstance(event, RunFailed | RunEnded | PathShown | TitleChanged | Unrecognized):
            return event.frame(self.session_id, self.run_id, self.ts)
        return event_frame(event, self.session_id, self.run_id or "", self.ts)

    def frame(self) -> dict[str, Any]:
        """Its wire frame, as sent: with its `seq` once stored, without one when it was not
        (a frame read back that this server does not know: as it was stored)."""
        frame = self.draft()
        if "seq" in frame and not isinstance(self.event, Unrecognized):
            if self.seq is None:
                del frame["seq"]
            else:
                frame["seq"] = self.seq
        return frame

    @classmethod
    def of_run(cls, event: AgentEvent, session_id: str, run_id: str, ts: int) -> Event:
        """A run's event as the server reports it, whichever way it is read later: a run the
        time limit ended is an `error` (docs/wire-protocol.md has no such stop reason), as
        its stored frame reads back."""
        if isinstance(event, RunStopped) and event.reason == "run_timeout":
            failed = RunFailed("internal_error", RUN_TIMEOUT_MESSAGE, event.usage)
            return cls(failed, session_id, run_id, ts)
        return cls(event, session_id, run_id, ts)

    def numbered(self, seq: int) -> Event:
        """This event as stored, at `seq`."""
        return replace(self, seq=seq)


def event_of(frame: dict[str, Any]) -> Event:
    """The event a wire frame says (the reverse of `Event.frame`). A frame this server does
    not know, or whose fields do not fit, is `Unrecognized`: never an error."""
    session_id, run_id, ts, seq = (frame.get(k) for k in ("session_id", "run_id", "ts", "seq"))
    envelope = fitted(_Envelope, {"session_id": session_id, "run_id": run_id, "ts": ts, "seq": seq})
    kind = frame.get("type")
    event: AgentEvent | ServerEvent | None = None
    if envelope is not None:  # else a damaged frame, whatever its kind says
        event = agent_event(frame)
        if event is None and isinstance(kind, str) and kind in _SERVER_FRAMES:
            cls, wired = _SERVER_FRAMES[kind]
            event = fitted(cls, {attr: frame[wire] for wire, attr in wired if wire in frame})
    return Event(
        event or Unrecognized(frame),
        session_id if isinstance(session_id, str) else "",
        run_id if isinstance(run_id, str) else None,
        ts if isinstance(ts, int) and not isinstance(ts, bool) else 0,
        seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
    )


@dataclass(frozen=True, slots=True)
class _Envelope:
    """What every event's frame carries, as a stored one must have it (`session_title` is
    never stored, and has neither `ts` nor `seq`)."""

    session_id: str
    run_id: str | None
    ts: int | None
    seq: int | None


def step_of(event: AgentEvent | ServerEvent) -> int:
    """The step `event` happened in; 0 for one of no step (a run's start, its end...)."""
    step = getattr(event, "step", 0)
    return step if isinstance(step, int) else 0


def usage_of(event: AgentEvent | ServerEvent) -> dict[str, Any] | None:
    """The tokens (and cost) a run's last event reports: a completion, a stop, a chat reply,
    or an `error` (the calls before a model failure were paid for); None for other events."""
    if isinstance(event, RunCompleted | RunStopped | ChatDone | RunFailed):
        return event.usage
    return None


def question_of(event: InputRequested) -> PendingQuestion:
    """The question `event` asks, as it waits for the user."""
    return PendingQuestion(event.question, event.call_id, event.step, event.expires_at)


def approval_of(event: ApprovalRequested) -> PendingApproval:
    """The call `event` asks to approve, as it waits for the user."""
    return PendingApproval(event.name, event.arguments, event.call_id, event.step, event.expires_at)
