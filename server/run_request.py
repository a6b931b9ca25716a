"""RunRequest: a `chat` frame checked against the settings and the tools, ready to run.

Checking is pure (no store, no session), so a frame that cannot start a run is refused with
its ProtocolError before anything is counted or written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agent.acting import REQUEST_INPUT
from agent.context import RECALL_DETAILS
from agent.ports import ToolSpec
from agent.run import Style
from agent.validation import quoted
from server.protocol import ChatFrame, ProtocolError
from server.settings import AgentSettings

__all__ = ["Origin", "RunRequest", "read_request", "rerun_request"]

Origin = Literal["chat", "retry", "continue"]


@dataclass(frozen=True, slots=True)
class RunRequest:
    content: str
    agent_mode: bool
    max_steps: int
    tools: tuple[str, ...] | None
    style: Style
    client_id: str | None = None
    origin: Origin = "chat"
    client_tools: tuple[ToolSpec, ...] = ()
    replaces: str | None = None  # a run of the shown path this one is a new version of


def read_request(
    frame: ChatFrame,
    settings: AgentSettings,
    available: Sequence[str],
    origin: Origin = "chat",
    client_tools: Sequence[ToolSpec] = (),
) -> RunRequest:
    """Return what `frame` asks to run, defaults filled in; raise ProtocolError for more steps
    than allowed, a tool not in `available`, or a client tool named like a server tool."""
    steps = _steps(frame.agent_max_steps, settings)
    tools = None if frame.tools is None else tuple(frame.tools)
    unknown = [t for t in tools or () if t not in available]
    if unknown:
        names = ", ".join(quoted(t) for t in unknown)  # each, as promised: at most 1024
        enabled = ", ".join(available) or "none"
        raise ProtocolError(
            "invalid_message",
            f"tools: unknown tool{'s' if len(unknown) > 1 else ''} {names} (enabled: {enabled}).",
        )
    taken = {*available, REQUEST_INPUT, RECALL_DETAILS}  # and the loop's own tools
    clash = ", ".join(quoted(t.name) for t in client_tools if t.name in taken)
    if clash:
        raise ProtocolError("invalid_message", f"tools: {clash} is a server tool's name.")
    mode = settings.default_mode if frame.agent_mode is None else frame.agent_mode
    return RunRequest(
        frame.content,
        mode,
        steps,
        tools,
        frame.agent_style or settings.style,
        frame.id,
        origin,
        tuple(client_tools),
        frame.replaces,
    )


def rerun_request(
    content: str,
    agent_mode: bool,
    max_steps: int | None,
    client_id: str | None,
    origin: Origin,
    settings: AgentSettings,
) -> RunRequest:
    """A `retry` or `continue`: `content` (the stored message, or the request to go on) run
    again with every tool and the configured style, at most `max_steps` steps."""
    steps = _steps(max_steps, settings)
    return RunRequest(content, agent_mode, steps, None, settings.style, client_id, origin)


def _steps(asked: int | None, settings: AgentSettings) -> int:
    """The steps a run may take: as asked, else the default; more than allowed is refused."""
    limit = settings.max_steps_limit
    steps = asked or settings.default_max_steps
    if steps > limit:
        raise ProtocolError(
            "invalid_message", f"agent_max_steps: must be at most {limit} (got {steps})."
        )
    return steps
