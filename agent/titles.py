"""A short title for a conversation, written by the model after its first answer: chats
listed by their raw first message look alike once cut short on a phone."""

from __future__ import annotations

from agent.messages import Message
from agent.ports import CallInfo, ChatModel

__all__ = ["TITLE_MAX_CHARS", "clean_title", "write_title"]

TITLE_MAX_CHARS = 60
_READ_CHARS = 400  # of the reply: a title is the first line; a model that rambles is cut off
_SHOWN_CHARS = 2000  # of the question and of the answer, shown to the model
# One line (the prompt files are being rewritten; it moves to prompts/ with them).
_ASK = "Write a title of at most six words for this conversation. Reply with the title only."


async def write_title(model: ChatModel, question: str, answer: str, call: CallInfo) -> str | None:
    """One small model call; the title, or None when the reply holds none. Raises what the
    model raises (ModelError): the caller keeps the title it has."""
    messages = [
        Message("system", _ASK),
        Message("user", f"{question[:_SHOWN_CHARS]}\n\n---\n\n{answer[:_SHOWN_CHARS]}"),
    ]
    text = ""
    reply = model.stream(messages, tools=(), call=call, tool_choice="none")
    try:
        async for item in reply:
            if isinstance(item, str):
                text += item
                if len(text) > _READ_CHARS:
                    break
    finally:
        close = getattr(reply, "aclose", None)  # end the request now, not when collected
        if close is not None:
            await close()
    return clean_title(text)


def clean_title(text: str) -> str | None:
    """The first line of a reply, without quotes, Markdown marks, a "Title:" label or a
    final period, at most TITLE_MAX_CHARS (cut at a word)."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = line.strip(" \t\"'`*#_")
    if line.casefold().startswith("title:"):
        line = line[len("title:") :].strip(" \t\"'`*#_")
    line = " ".join(line.split()).strip(" \"'`*#_.")
    if len(line) > TITLE_MAX_CHARS:
        cut = line[: TITLE_MAX_CHARS - 1]
        line = (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"
    return line or None
