"""normalize: the one shape every request has, whatever the model server.

OpenAI tolerates almost any message list; strict chat templates (llama.cpp's `--jinja`, vLLM
with Mistral, Gemma or Llama templates, gateways to Anthropic) refuse consecutive messages of
one role, a system message after the first, or a tool result that does not follow its call.
Worse, a list that ends with an assistant message is a *prefill* there: the model continues
that message instead of answering. So every request is normalized here, always:

- one system message, first (later ones become user-side notes);
- a tool result directly follows the assistant message that made its call (an orphan becomes
  a user-side note; a call without a result gets one that says so);
- consecutive messages of one role are merged; empty assistant messages are dropped;
- the list ends with a user or tool message (never a prefill).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agent.messages import Message

__all__ = ["normalize"]

_NO_RESULT = "No result was recorded for this call."


def normalize(messages: Sequence[Message]) -> list[Message]:
    """Return `messages` in the shape every chat template accepts (see the module doc)."""
    lead = messages[0] if messages and messages[0].role == "system" else None
    runs: list[list[Message]] = []  # consecutive messages of one role, merged at the end
    open_calls: dict[str, str] = {}  # calls of the last assistant message still without result
    for index, message in enumerate(messages):
        if index == 0 and lead is not None:
            continue
        if message.role == "tool":
            if message.tool_call_id in open_calls:
                open_calls.pop(message.tool_call_id)
                runs.append([message])
            else:
                name = message.tool_name or "a tool"
                _append(runs, Message("user", f"[Result of {name}] {message.content}"))
            continue
        _close_calls(runs, open_calls)
        if message.role == "system":
            message = Message("user", f"[Note from the system] {message.content}")
        elif message.role == "assistant":
            if not message.content.strip() and not message.tool_calls:
                continue
            open_calls = {c.id: c.name for c in message.tool_calls}
        _append(runs, message)
    _close_calls(runs, open_calls)
    if not runs or runs[-1][0].role == "assistant":
        runs.append([Message("user", "Continue.")])
    out = [run[0] if len(run) == 1 else _merged(run) for run in runs]
    return [lead, *out] if lead is not None else out


def _append(runs: list[list[Message]], message: Message) -> None:
    """Append `message`, to the last run when it has the same role (tool results never merge:
    each answers its own call)."""
    if runs and runs[-1][0].role == message.role and message.role != "tool":
        runs[-1].append(message)
    else:
        runs.append([message])


def _merged(run: list[Message]) -> Message:
    """One message for a run of one role: its texts (blank ones left out), then its calls.
    Merged once per run, not message by message: a step's phases make runs of three."""
    content = "\n\n".join(m.content for m in run if m.content.strip())
    return replace(run[0], content=content, tool_calls=tuple(c for m in run for c in m.tool_calls))


def _close_calls(runs: list[list[Message]], open_calls: dict[str, str]) -> None:
    """Give every call still open a result, so nothing else comes between call and result."""
    for call_id, name in open_calls.items():
        runs.append([Message("tool", _NO_RESULT, tool_call_id=call_id, tool_name=name)])
    open_calls.clear()
