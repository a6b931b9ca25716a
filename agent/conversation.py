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
    out: list[Message] = []
    open_calls: dict[str, str] = {}  # calls of the last assistant message still without result
    for index, message in enumerate(messages):
        if index == 0 and lead is not None:
            continue
        if message.role == "tool":
            if message.tool_call_id in open_calls:
                open_calls.pop(message.tool_call_id)
                out.append(message)
            else:
                name = message.tool_name or "a tool"
                _append(out, Message("user", f"[Result of {name}] {message.content}"))
            continue
        _close_calls(out, open_calls)
        if message.role == "system":
            message = Message("user", f"[Note from the system] {message.content}")
        elif message.role == "assistant":
            if not message.content.strip() and not message.tool_calls:
                continue
            open_calls = {c.id: c.name for c in message.tool_calls}
        _append(out, message)
    _close_calls(out, open_calls)
    if not out or out[-1].role == "assistant":
        out.append(Message("user", "Continue."))
    return [lead, *out] if lead is not None else out


def _append(out: list[Message], message: Message) -> None:
    """Append, merging into the previous message when both have the same role."""
    last = out[-1] if out else None
    if last is None or last.role != message.role or message.role == "tool":
        out.append(message)
        return
    content = "\n\n".join(part for part in (last.content, message.content) if part.strip())
    out[-1] = replace(last, content=content, tool_calls=last.tool_calls + message.tool_calls)


def _close_calls(out: list[Message], open_calls: dict[str, str]) -> None:
    """Give every call still open a result, so nothing else comes between call and result."""
    for call_id, name in open_calls.items():
        out.append(Message("tool", _NO_RESULT, tool_call_id=call_id, tool_name=name))
    open_calls.clear()
