"""Stored tool results as text, and reading them back piece by piece.

A result is stored as the text the model reads (`result_text`): a string as it is; anything
else as compact JSON, except that long or multi-line strings (a fetched page, a file) are
lifted out of the JSON and follow it as text of their own. So a page keeps its lines, and a
fact at its end is a line like any other, not a place deep inside one escaped JSON string.

`recall` reads a stored result back in bounded pieces: from a character `offset`, or only the
passages that mention a `focus`, each piece within what one tool result may hold, and each
saying where the next one starts, so every character of every stored result can be reached.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from agent.messages import Message

__all__ = ["Fit", "recall", "result_text"]

Fit = Callable[[str], str]  # the longest head of a text that one piece may hold

_LIFT_CHARS = 500  # strings longer than this (or with a line break) follow the JSON
_PASSAGE_CHARS = 600  # a line longer than this is searched in parts of this size
_OVERLAP = 80  # that overlap, so that words at a part's edge are found whole
_MAX_CHARS = 8000  # of one piece, whatever the token limit allows
_WORD = re.compile(r"\w+")


def result_text(value: Any) -> str:
    """`value` as the text a tool message stores."""
    if isinstance(value, str):
        return value
    texts: list[tuple[str, str]] = []

    def lift(item: Any, path: str) -> Any:
        if isinstance(item, str) and (len(item) > _LIFT_CHARS or "\n" in item):
            texts.append((path, item))
            return f"(text {len(texts)}, below)"
        if isinstance(item, dict):
            return {k: lift(v, f"{path}.{k}" if path else str(k)) for k, v in item.items()}
        if isinstance(item, list):
            return [lift(v, f"{path}[{i}]") for i, v in enumerate(item)]
        return item

    envelope = orjson.dumps(lift(value, "")).decode()
    parts = [envelope]
    parts += [f"[text {i}: {path}]\n{text}" for i, (path, text) in enumerate(texts, start=1)]
    return "\n\n".join(parts)


def recall(
    conversation: Sequence[Message],
    result_id: str,
    fit: Fit,
    *,
    focus: str | None = None,
    offset: int = 0,
) -> str:
    """The piece of the stored result `result_id` from character `offset`, or (with `focus`)
    its passages from there that mention the most focus words; LookupError when there is no
    such result."""
    text = _stored(conversation, result_id)
    offset = max(0, min(offset, len(text)))
    if focus and focus.strip():
        return _focused(text, focus, offset, fit)
    piece = fit(text[offset : offset + _MAX_CHARS]) or text[offset : offset + 1]
    end = offset + len(piece)
    header = f"[Characters {offset}-{end} of {len(text)}.]"
    if end < len(text):
        return f"{header}\n{piece}\n[More: call recall_details with offset {end} to read on.]"
    return f"{header}\n{piece}\n[End of the result.]"


def _stored(conversation: Sequence[Message], result_id: str) -> str:
    """The result's text as stored: offsets are those the cut marker names. (A result stored
    as one JSON line by an older version is searched in parts, like any long line.)"""
    for message in reversed(conversation):
        if message.role == "tool" and message.tool_call_id == result_id:
            return message.content
    raise LookupError(f"There is no stored result with id {result_id!r}.")


def _focused(text: str, focus: str, offset: int, fit: Fit) -> str:
    words = [w.lower() for w in _WORD.findall(focus) if len(w) > 1] or [focus.strip().lower()]
    scored = [(sum(w in p.lower() for w in words), at, p) for at, p in _passages(text, offset)]
    best = max((score for score, _, _ in scored), default=0)
    if best == 0:
        where = f" after character {offset}" if offset else ""
        return f"Nothing in this result{where} mentions {focus!r}."
    shown: list[str] = []
    for score, at, passage in scored:
        if score < best:
            continue
        candidate = "\n".join([*shown, f"[at character {at}] {passage}"])
        if shown and (len(candidate) > _MAX_CHARS or fit(candidate) != candidate):
            more = f"[More passages: call recall_details with this focus and offset {at}.]"
            return "\n".join([*shown, more])
        shown.append(candidate.rsplit("\n", 1)[-1] if shown else fit(candidate))
    return "\n".join(shown)


def _passages(text: str, offset: int) -> list[tuple[int, str]]:
    """The lines of `text` from `offset` (long ones in parts), with where each starts."""
    found: list[tuple[int, str]] = []
    at = offset
    for line in text[offset:].splitlines(keepends=True):
        for start in range(0, max(len(line), 1), _PASSAGE_CHARS):
            part = line[start : start + _PASSAGE_CHARS + _OVERLAP].rstrip("\r\n")
            if part.strip():
                found.append((at + start, part))
        at += len(line)
    return found
