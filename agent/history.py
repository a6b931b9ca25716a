"""Build the message list one LLM call sees from the stored conversation.

Exactly one system message leads every list. Earlier runs contribute what the user said, the
tool calls and results, and the final answers; their reasoning and observation texts are left
out (the final answer already says what mattered). Act and Observe read the current run the
same way (`own_thinking=False`): the conversation as a plain tool loop has it, the task, the
calls and their results, the form small models were trained to call tools from and read
results in; what Reason guessed before a call is not there to be read back as a finding.
Notes the server stored as `system` messages (e.g. "the previous run was stopped") are shown
as user-side notes, because several OpenAI-compatible servers reject a second system message.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.messages import Message

__all__ = ["build_messages"]

_THINKING_PHASES = frozenset({"reason", "observe"})


def build_messages(
    system: str, conversation: Sequence[Message], run_id: str, *, own_thinking: bool = True
) -> list[Message]:
    """Return [system, *conversation as the model should see it] for the current run."""
    out = [Message("system", system)]
    for message in conversation:
        if message.phase in _THINKING_PHASES and (message.run_id != run_id or not own_thinking):
            continue
        if not own_thinking and message.run_id == run_id and message.phase == "verify":
            continue
        if message.role == "system":
            note = f"[Note from the system] {message.content}"
            out.append(Message("user", note, phase="note", run_id=message.run_id))
            continue
        out.append(message)
    return out
