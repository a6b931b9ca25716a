"""What a frame can carry of a value a tool, a person or an MCP server handed the run: its JSON
within a byte bound (cut with a note past it), and no text that JSON cannot hold."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["bounded"]


def bounded(value: Any, limit: int) -> Any:
    """`value` when its JSON fits in `limit` bytes; else its text (the string, or the JSON)
    cut to fit, with a note that says so. The result goes to the model, the store and every
    watcher in one frame, which must stay within what a WebSocket client accepts. Raises when
    `value` is no JSON at all."""
    try:
        encoded = orjson.dumps(value)
    except orjson.JSONEncodeError:  # a lone surrogate, or no JSON at all: then it raises again
        value = _escaped(value)
        encoded = orjson.dumps(value)
    if len(encoded) <= limit:
        return value
    text = value if isinstance(value, str) else encoded.decode()
    keep = max(0, limit - 200)  # characters; fewer when they take more bytes than one each
    while True:
        kept = text[:keep]
        note = (
            f"\n\n[Cut here: the result had {len(encoded):,} bytes as JSON; "
            f"the {len(kept.encode()):,} above are its beginning.]"
        )
        if keep <= 0 or len(orjson.dumps(kept + note)) <= limit:
            return kept + note
        keep = keep * 3 // 4


def _escaped(value: Any) -> Any:
    """`value` with every lone surrogate in its text written as its escape (`\\udcff`): a
    file name that is not UTF-8 (`os.fsdecode`) is text no JSON can carry."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped(key): _escaped(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_escaped(item) for item in value]
    return value
