"""Reading a streamed chat completion: server-sent events from raw bytes into text, thinking,
tool calls and usage.

The stream is read as bytes and split into lines here, not by an HTTP library's line decoder:
the SDK's typed chunk objects cost about 100 µs each, and a generic decoder's str lines cost
more than the JSON parse of the chunk. Each `data:` line is one chunk (OpenAI-compatible
servers send one line per event); comments, event names and keep-alives are skipped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from agent.messages import ToolCall
from agent.ports import ModelTurn, Thinking

__all__ = ["MalformedChunk", "SSELines", "StreamState", "ThinkSplitter"]


class SSELines:
    """Split a byte stream into lines, across chunk borders, at LF, CRLF or a lone CR.

    A CR at the end of one chunk and the LF at the start of the next make an extra empty line,
    which a reader of `data:` lines skips like any blank line between events. The pieces of an
    unfinished line are joined once, when it ends, not with every read (a long line would
    otherwise be copied again per read), and a line longer than `MAX_LINE` bytes is refused:
    no model sends one, and a server that never sends a newline must not fill the memory.
    """

    MAX_LINE = 8 << 20

    __slots__ = ("_rest", "_rest_size")

    def __init__(self) -> None:
        self._rest: list[bytes] = []
        self._rest_size = 0

    def feed(self, data: bytes) -> list[bytes]:
        """The lines that `data` completes; an unfinished last line waits for more."""
        if b"\r" in data:  # JSON never holds a raw CR, so every CR ends a line
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in data:
            self._rest_size += len(data)
            if self._rest_size > self.MAX_LINE:
                raise MalformedChunk(f"a server-sent line is longer than {self.MAX_LINE:,} bytes")
            self._rest.append(data)
            return []
        if self._rest:
            data = b"".join([*self._rest, data])
        lines = data.split(b"\n")
        last = lines.pop()
        self._rest, self._rest_size = ([last], len(last)) if last else ([], 0)
        return lines

    def finish(self) -> list[bytes]:
        """End of the stream: a last line without its newline still counts."""
        rest, self._rest, self._rest_size = b"".join(self._rest), [], 0
        return [rest] if rest else []


_MERGE_ABOVE = 4  # pieces waiting; a short or slow reply keeps its chunks as they came


@dataclass(slots=True)
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamState:
    """What a streamed reply said so far, and the pieces not yet passed on (adjacent pieces of
    one kind merged)."""

    __slots__ = ("events", "finish_reason", "out", "parts", "text", "think", "usage")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.parts: dict[int, _ToolCallParts] = {}
        self.usage = (0, 0, 0)
        self.finish_reason: str | None = None
        self.think = ThinkSplitter()
        self.out: list[tuple[bool, str]] = []
        self.events = 0  # server-sent `data:` lines: none at all is no answer, not an empty one

    def line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return  # comments, event names, keep-alives
        self.events += 1
        data = line[5:].strip()
        if data == b"[DONE]":
            return  # read to the end, so the connection goes back to the pool
        chunk = orjson.loads(data)
        if not isinstance(chunk, dict):
            raise MalformedChunk("a stream chunk is not a JSON object")
        if "error" in chunk:
            raise MalformedChunk(f"the stream reported an error: {_error_text(chunk)}")
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        for choice in (chunk.get("choices") or ())[:1]:
            self.finish_reason = _str(choice.get("finish_reason")) or self.finish_reason
            delta = choice.get("delta") or {}
            thought = _str(delta.get("reasoning_content") or delta.get("reasoning"))
            if thought:
                self._put(True, thought)
            content = _str(delta.get("content"))
            if content:
                for is_thinking, piece in self.think.feed(content):
                    self._put(is_thinking, piece)
            for tc in delta.get("tool_calls") or ():
                part = self.parts.setdefault(_int(tc.get("index")), _ToolCallParts())
                part.id = part.id or _str(tc.get("id"))
                function = tc.get("function") or {}
                part.name = part.name or _str(function.get("name"))
                part.arguments.append(_str(function.get("arguments")))

    def _put(self, is_thinking: bool, piece: str) -> None:
        if not is_thinking:
            self.text.append(piece)
        self.out.append((is_thinking, piece))

    def take(self) -> list[str | Thinking]:
        """The pieces not yet passed on: one by one when few wait, else adjacent pieces of one
        kind merged (a backlog costs one event per kind, not one per model chunk)."""
        out, self.out = self.out, []
        if len(out) <= _MERGE_ABOVE:
            return [Thinking(p) if thinking else p for thinking, p in out]
        merged: list[tuple[bool, list[str]]] = []
        for thinking, piece in out:
            if merged and merged[-1][0] == thinking:
                merged[-1][1].append(piece)
            else:
                merged.append((thinking, [piece]))
        return [Thinking("".join(p)) if thinking else "".join(p) for thinking, p in merged]

    def finish(self) -> None:
        if self.events == 0:
            raise MalformedChunk("the reply held no server-sent events")
        for is_thinking, piece in self.think.finish():
            self._put(is_thinking, piece)

    def turn(self) -> ModelTurn:
        calls = tuple(
            ToolCall(p.id or f"call_{uuid.uuid4().hex[:24]}", p.name, "".join(p.arguments))
            for _, p in sorted(self.parts.items())
        )
        u = self.usage
        return ModelTurn("".join(self.text), calls, u[0], u[1], self.finish_reason, u[2])


class ThinkSplitter:
    """Split a leading `<think>…</think>` block out of streamed text, across chunk borders.

    Only a block that opens before any visible text counts: a `<think>` later in an answer
    is the model talking about the tag.
    """

    _OPEN, _CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self._buffer = ""
        self._inside = False
        self._decided = False  # visible text was seen, or the block closed
        self._trim = False  # drop the white space right after a closed block

    def feed(self, chunk: str) -> list[tuple[bool, str]]:
        """Return (is_thinking, text) pieces that are safe to pass on now."""
        if self._decided and not self._inside:
            if self._trim:
                chunk = chunk.lstrip()
                self._trim = not chunk
            return [(False, chunk)] if chunk else []
        self._buffer += chunk
        out: list[tuple[bool, str]] = []
        while self._buffer:
            tag = self._CLOSE if self._inside else self._OPEN
            if not self._inside:
                stripped = self._buffer.lstrip()
                if stripped.startswith(tag):
                    self._buffer = stripped[len(tag) :]
                    self._inside = True
                    continue
                if stripped and not tag.startswith(stripped):
                    self._decided = True
                    out.append((False, self._buffer))
                    self._buffer = ""
                break
            end = self._buffer.find(tag)
            if end >= 0:
                if end:
                    out.append((True, self._buffer[:end]))
                self._buffer = self._buffer[end + len(tag) :].lstrip()
                self._inside = False
                self._decided = True
                self._trim = not self._buffer
                if self._buffer:
                    out.append((False, self._buffer))
                    self._buffer = ""
                break
            keep = next(
                (n for n in range(len(tag) - 1, 0, -1) if self._buffer.endswith(tag[:n])), 0
            )
            cut = len(self._buffer) - keep
            if cut:
                out.append((True, self._buffer[:cut]))
            self._buffer = self._buffer[cut:]
            break
        return out

    def finish(self) -> list[tuple[bool, str]]:
        """End of the stream: whatever is held back goes out as what it was."""
        rest, self._buffer = self._buffer, ""
        return [(self._inside, rest)] if rest else []


class MalformedChunk(ValueError):
    """A streamed chunk whose fields have the wrong types (nothing upstream validates them)."""


def _usage(raw: Any) -> tuple[int, int, int]:
    if not isinstance(raw, dict):
        raise MalformedChunk("usage is not an object")
    details = raw.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return _int(raw.get("prompt_tokens")), _int(raw.get("completion_tokens")), cached


def _error_text(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)[:200]


def _str(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedChunk(f"expected text, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise MalformedChunk(f"expected a number, got {type(value).__name__}")
    return value
