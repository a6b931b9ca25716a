"""Separate a streamed LLM reply into user-facing text and its JSON control block.

Reason and Observe replies end with a small JSON object that steers the loop. The user must
never see it, yet the text around it streams token by token. `ControlStream` releases text as
soon as it cannot be the start of a control block, holds back what might be one, and cuts it
out once it proves to be one. The concatenation of everything released is the reply's text.

Accepted forms: a fenced block (```json … ``` or ``` … ```), a bare object that starts at a
line start or after white space, or an `<action>…</action>` tag (always hidden); the markers
of `<thinking>…</thinking>` are dropped and their text is shown. A fenced ```json block at the
very end is cut even when it is malformed (the model tried to write a control block), and so
is an unlabelled fence that holds an object; anything else that does not parse, such as a
plain code block, is ordinary text. Missing or malformed blocks give `control=None`:
the caller reads free text.

A fenced block is read as balanced JSON: a fence inside one of its strings (a final answer
with its own code block) does not end it. With `answer_after`, the text after the first block
that satisfies it is the final answer: it is released through `take_answer()` as it streams,
never searched for further blocks (so code blocks in the answer stay as written).

Small models often write their block again and again until the token limit. Once a block has
been read and another begins right after it (only white space between, or a second object in
the same fence), the stream is `settled`: the first block stands, nothing more is shown, and
the caller may stop reading the reply. A block followed by prose is not settled, so a later
block still replaces it, as before. An answer that opens with the block written again is no
answer: it settles the stream too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OBSERVE_KEYS",
    "REASON_KEYS",
    "ControlStream",
    "ObserveControl",
    "completed_json_object",
    "json_object_end",
    "ReasonControl",
    "read_observe_control",
    "observe_ends_run",
    "read_loose_control",
    "read_reason_control",
    "salvaged_json_object",
    "split_control",
]

REASON_KEYS = frozenset({"plan", "tools_to_consider", "finish"})
OBSERVE_KEYS = frozenset({"observation", "should_continue", "final_answer"})

_FENCE = "```"
_ACTION_OPEN, _ACTION_CLOSE = "<action>", "</action>"
_THINKING_TAGS = ("<thinking>", "</thinking>")  # shown without the tags
_TAGS = (_ACTION_OPEN, *_THINKING_TAGS)
_TAG_PREFIXES = frozenset(tag[:n] for tag in _TAGS for n in range(1, len(tag) + 1))
_LONGEST_TAG = max(len(t) for t in _TAGS)
_MARKERS = ("`", "{", "<")  # a chunk with none of these cannot start a block or a tag
_UNDECIDED = -1
_MAX_OPEN_OBJECTS_READ = 4  # each costs a scan to the end of the reply
# Decided text kept before it is dropped: past this, each chunk would copy the whole reply.
_KEEP_DECIDED = 4096
_SPACES = re.compile(r"\s*")
_CANDIDATE_START = re.compile(re.escape(_FENCE) + "|" + re.escape(_ACTION_OPEN) + r"|\{")


@dataclass(frozen=True, slots=True)
class _Candidate:
    start: int
    end: int  # index after the candidate, or _UNDECIDED while it is still open
    fenced: bool
    json_label: bool
    control: dict[str, Any] | None
    hidden: bool = False  # never shown, even when it is not a valid control block
    repeated: bool = False  # another object follows inside the same fence: a repeat


class ControlStream:
    """Feed streamed text in; get back the part that is safe to show now."""

    def __init__(
        self,
        keys: frozenset[str],
        *,
        answer_after: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self._keys = keys
        self._answer_after = answer_after
        self._text = ""
        self._pos = 0  # everything before this index is decided: released or cut
        self._released: list[str] = []
        self._answer: list[str] = []
        self._answer_taken = 0
        self._answer_begun = False  # take_answer returned text that was not white space
        self._answering = False  # past the block that starts the answer
        self._scan: _ObjectScan | None = None  # the open object being read, resumed per chunk
        self._fence_searched = (-1, 0)  # (open fence's start, where its closing search resumes)
        self._block_end: int | None = None  # where the last control block read ended
        self._open_objects_read = 0  # unclosed objects read on inside at the end (bounded)
        self.control: dict[str, Any] | None = None
        self.settled = False  # the block is read and the model began another: stop reading

    @property
    def answer(self) -> str:
        """The text written after the answer-starting block, trimmed."""
        return "".join(self._answer).strip()

    def take_answer(self) -> str:
        """Return the answer text released since the last call (possibly empty), without
        the white space that would lead the answer. Only the new pieces are joined: called
        per chunk, joining the whole answer made a long one quadratic."""
        new = "".join(self._answer[self._answer_taken :])
        self._answer_taken = len(self._answer)
        if not self._answer_begun:
            new = new.lstrip()
            self._answer_begun = bool(new)
        return new

    @property
    def released_text(self) -> str:
        return "".join(self._released)

    def feed(self, chunk: str) -> str:
        """Add a chunk; return the text that may be shown now (possibly empty)."""
        if self._pos > _KEEP_DECIDED:
            self._drop_decided()
        self._text += chunk
        return self._advance(final=False)

    def finish(self) -> str:
        """End the stream; return the last text to show. `control` is then final."""
        return self._advance(final=True)

    @property
    def content(self) -> str:
        """The user-facing text so far, trimmed."""
        return self.released_text.strip()

    def _drop_decided(self) -> None:
        """Forget the text before `_pos` that nothing reads again, so that a long reply is not
        copied whole with every chunk (that made it quadratic). Kept: the character before
        the cut, by which `_at_line_start` and `_after_space` judge the first one kept. Of the
        decided text after the last block read, only whether it is all white space matters
        (a block after white space alone repeats it; after prose it replaces it), so that
        text goes too: white space moves the block's end up to `_pos`, prose forgets it.
        Indices into the text move with it; a scan or a fence search that began before the
        cut belongs to a candidate already decided, and is dropped."""
        text = self._text
        if self._block_end is not None:  # it never lies past `_pos`: a block read is decided
            blank = not text[self._block_end : self._pos].strip()
            self._block_end = self._pos if blank else None
        cut = self._pos
        while cut > 0 and text[cut - 1] in " \t":
            cut -= 1
        cut -= 1
        if cut < _KEEP_DECIDED // 2:
            return
        self._text = text[cut:]
        self._pos -= cut
        if self._block_end is not None:
            self._block_end -= cut
        scan = self._scan
        if scan is not None and scan.start >= cut:
            scan.shift(cut)
        else:
            self._scan = None
        opened, resume = self._fence_searched
        self._fence_searched = (opened - cut, resume - cut) if opened >= cut else (-1, 0)

    def _advance(self, *, final: bool) -> str:
        out: list[str] = []
        text = self._text
        while self._pos < len(text) and not self.settled:
            if self._answering:
                if not self._answer and self._repeat_opens_answer(final=final):
                    break  # undecided yet, or the "answer" is the block again (settled)
                self._answer.append(text[self._pos :])
                self._pos = len(text)
                break
            start = self._find_candidate(self._pos, final=final)
            if start == _UNDECIDED:  # no candidate, but the tail may still grow into one
                cut = len(text) if final else self._safe_end(self._pos)
                out.append(text[self._pos : cut])
                self._pos = cut
                break
            if self._block_end is not None and not text[self._block_end : start].strip():
                self.settled = True  # another block right after the one read: a repeat
                break
            out.append(text[self._pos : start])
            self._pos = start
            cand = self._read_candidate(start, final=final)
            if cand.end == _UNDECIDED:
                if not final:
                    break
                if cand.fenced:
                    self._open_fence_at_end(cand, out)
                    continue
                if self._settle_open(cand, out):
                    continue
                break
            if cand.control is not None or cand.hidden:
                self.control = cand.control or self.control
                self._pos = cand.end
                if cand.control is not None and self._answer_after is not None:
                    self._answering = self._answer_after(cand.control)
                # A block right after this one will be a repeat; a second object inside the
                # same fence is one already, and settles even before an answer (the rest
                # would be the block again, not the answer).
                if cand.control is not None and (cand.repeated or not self._answering):
                    self._block_end = cand.end
                    self.settled = cand.repeated
                continue
            rest = text[cand.end :]
            if rest.strip():  # more text follows: it was ordinary content
                out.append(text[start : cand.end])
                self._pos = cand.end
                continue
            if not final:
                break
            if not (cand.fenced and self._meant_as_block(cand)):
                out.append(text[start : cand.end])
            self._pos = cand.end
        released = "".join(out)
        for tag in _THINKING_TAGS:
            released = released.replace(tag, "")
        if released:
            self._released.append(released)
        return released

    def _repeat_opens_answer(self, *, final: bool) -> bool:
        """Before the first answer text: True while it may still be the control block written
        again (held back), or when it is (the stream is then settled, with no answer). An
        answer that opens with prose or a code block in another language goes out at once."""
        text = self._text
        start = _skip_space(text, self._pos)
        if start == len(text) or (_FENCE.startswith(text[start:]) and not final):
            return not final  # nothing yet, or "`", "``": maybe a fence
        if text.startswith(_FENCE, start):
            line_end = text.find("\n", start)
            if line_end == -1:
                return not final
            if not _label_is_json(text[start:line_end]):
                return False
        elif not text.startswith("{", start):
            return False
        cand = self._read_candidate(start, final=final)
        if cand.end == _UNDECIDED:
            return not final
        if cand.control is None:
            return False
        for key, value in cand.control.items():  # what the first block left empty
            if self.control is not None and not self.control.get(key):
                self.control[key] = value
        self.settled = True
        return True

    def _open_fence_at_end(self, cand: _Candidate, out: list[str]) -> None:
        """At the end of the stream, a fence that never closed is no code block: its opening
        line is cut when it was meant as the block's fence and shown otherwise, and the text
        inside is read on like any other. A model that opened a fence mid-line ("see ```json")
        makes its closing fence look like an opening one, with the block after it."""
        text = self._text
        line_end = text.find("\n", cand.start)
        if not self._meant_as_block(cand):
            out.append(_FENCE)
            self._pos = cand.start + len(_FENCE)
        else:
            self._pos = len(text) if line_end == -1 else line_end + 1

    def _settle_open(self, cand: _Candidate, out: list[str]) -> bool:
        """At the end of the stream, decide about an object or action tag that never closed:
        cut when it looks like a block cut short; else show its brace and return True to read
        on inside it ("{" opened in prose), a few times at most, as each read scans to the end."""
        body = self._text[cand.start :]
        head = body.lstrip("{ \t\r\n")
        if cand.hidden or any(head.startswith(f'"{k}"') for k in self._keys):
            self._pos = len(self._text)
            return False
        if self._open_objects_read < _MAX_OPEN_OBJECTS_READ:
            self._open_objects_read += 1
            out.append("{")
            self._pos = cand.start + 1
            return True
        out.append(body)
        self._pos = len(self._text)
        return False

    def _meant_as_block(self, cand: _Candidate) -> bool:
        """A fence at the very end that did not parse as a control block was still meant as
        one when it is labelled json, or unlabelled with an object inside; an unlabelled fence
        around anything else is the user's code block and stays visible."""
        if not cand.json_label:
            return False
        text = self._text
        line_end = text.find("\n", cand.start)
        if line_end == -1:
            return True  # only the fence line arrived: nothing to show
        if text[cand.start + len(_FENCE) : line_end].strip():
            return True  # labelled json
        return (
            text[line_end + 1 : cand.end if cand.end != _UNDECIDED else None]
            .lstrip()
            .startswith("{")
        )

    def _safe_end(self, pos: int) -> int:
        """Hold back a tail that could still become a candidate or a tag ("`", "{ ", "<thi")."""
        text = self._text
        end = len(text)
        tail_start = max(pos, end - _LONGEST_TAG)
        if not any(marker in text[tail_start:] for marker in _MARKERS):
            return end  # the common case: plain words
        for i in range(tail_start, end):
            piece = text[i:]
            if _at_line_start(text, i) and _FENCE.startswith(piece):
                return i
            if piece.rstrip() == "{" and _after_space(text, i):
                return i
            if piece in _TAG_PREFIXES:
                return i
        return end

    def _find_candidate(self, pos: int, *, final: bool) -> int:
        text = self._text
        i = pos
        while (hit := _CANDIDATE_START.search(text, i)) is not None:
            i = hit.start()
            marker = hit.group()
            if marker == _ACTION_OPEN:
                return i
            if marker == _FENCE and _at_line_start(text, i):
                return i
            if marker == "{" and _after_space(text, i):
                nxt = _skip_space(text, i + 1)
                if text.startswith('"', nxt) or (nxt == len(text) and not final):
                    return i
            i += 1
        return _UNDECIDED

    def _read_candidate(self, start: int, *, final: bool) -> _Candidate:
        text = self._text
        if text.startswith(_ACTION_OPEN, start):
            close = text.find(_ACTION_CLOSE, start)
            if close == -1:
                return _Candidate(start, _UNDECIDED, False, False, None, hidden=True)
            inner = text[start + len(_ACTION_OPEN) : close].strip()
            if inner.startswith(_FENCE):  # <action>```json {...}```</action>
                inner = inner.strip("`").removeprefix("json").strip()
            return _Candidate(
                start, close + len(_ACTION_CLOSE), False, False, self._control(inner), hidden=True
            )
        if text.startswith(_FENCE, start):
            line_end = text.find("\n", start)
            if line_end == -1:
                return _Candidate(start, _UNDECIDED, True, _label_is_json(text[start:]), None)
            label_json = _label_is_json(text[start:line_end])
            if label_json:
                balanced = self._read_fenced_object(start, line_end, final=final)
                if balanced is not None:
                    return balanced
            close = self._closing_fence(start, line_end + 1)
            if close == -1:
                return _Candidate(start, _UNDECIDED, True, label_json, None)
            next_line = text.find("\n", close)
            if _at_line_start(text, close) and next_line == -1 and not final:
                return _Candidate(start, _UNDECIDED, True, label_json, None)  # "```json" yet?
            end = close + len(_FENCE)
            if (
                _at_line_start(text, close)
                and text[end : next_line if next_line != -1 else None].strip()
            ):
                end = close  # "```json" opens the next fence: the one left open ends before it
            return _Candidate(start, end, True, label_json, self._control(text[line_end:close]))
        end = self._object_end(start)
        if end == _UNDECIDED:
            return _Candidate(start, _UNDECIDED, False, False, None)
        return _Candidate(start, end, False, False, self._control(text[start:end]))

    def _read_fenced_object(self, start: int, line_end: int, *, final: bool) -> _Candidate | None:
        """Read a ```json fence as one balanced object, so fences inside its strings stay
        inside; None when the fence does not hold an object (read it line-wise instead)."""
        text = self._text
        body = line_end + 1
        while body < len(text) and text[body] in " \t\r\n":
            body += 1
        if body >= len(text):
            return _Candidate(start, _UNDECIDED, True, True, None)
        if text[body] != "{":
            return None
        end = self._object_end(body)
        if end == _UNDECIDED:
            return _Candidate(start, _UNDECIDED, True, True, None)
        after = end
        while after < len(text) and text[after] in " \t\r\n":
            after += 1
        if len(text) - after < len(_FENCE) and _FENCE.startswith(text[after:]):  # still arriving
            return _Candidate(start, _UNDECIDED, True, True, None)
        if not text.startswith(_FENCE, after):
            control = self._control(text[body:end]) if text.startswith("{", after) else None
            if control is not None:  # the same fence goes on with another object
                return _Candidate(start, end, True, True, control, repeated=True)
            return None
        control = self._control(text[body:end])
        fence_end = after + len(_FENCE)
        next_line = text.find("\n", fence_end)
        if text[fence_end : next_line if next_line != -1 else None].strip():
            return _Candidate(start, after, True, True, control)  # "```json" opens the next one
        if next_line == -1 and not final:
            return _Candidate(start, _UNDECIDED, True, True, None)  # "```" or "```json" yet?
        return _Candidate(start, fence_end, True, True, control)

    def _object_end(self, start: int) -> int:
        """`json_object_end`, resumed where the previous chunk's scan stopped: a long reply
        with an unclosed `{` is read once, not once per chunk."""
        if self._scan is None or self._scan.start != start:
            self._scan = _ObjectScan(start)
        return self._scan.advance(self._text)

    def _closing_fence(self, start: int, after: int) -> int:
        """The closing fence of the fence opened at `start`, searched only in new text."""
        opened, resume = self._fence_searched
        if opened == start:
            after = max(after, resume)
        close = self._text.find(_FENCE, after)
        if close == -1:
            self._fence_searched = (start, max(after, len(self._text) - len(_FENCE) + 1))
        return close

    def _control(self, raw: str) -> dict[str, Any] | None:
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        if isinstance(value, dict) and self._keys.intersection(value):
            return value
        return None


def _at_line_start(text: str, i: int) -> bool:
    j = i - 1
    while j >= 0 and text[j] in " \t":
        j -= 1
    return j < 0 or text[j] == "\n"


def _skip_space(text: str, i: int) -> int:
    """The index of the first non-space character at or after `i` (len(text) if none)."""
    match = _SPACES.match(text, i)
    return match.end() if match else i


def _after_space(text: str, i: int) -> bool:
    return i == 0 or text[i - 1].isspace()


def _label_is_json(fence_line: str) -> bool:
    return fence_line[len(_FENCE) :].strip().lower() in ("json", "")


def _in_string_after(ch: str, escaped: bool) -> tuple[bool, bool]:
    """Inside a JSON string, after reading `ch`: (still inside it, the next one escaped)."""
    if escaped:
        return True, False
    if ch == "\\":
        return True, True
    return ch != '"', False


class _ObjectScan:
    """Where a scan for the end of one JSON object stopped, so it can go on as text grows."""

    __slots__ = ("depth", "end", "escaped", "in_string", "pos", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.pos = start  # the next index to read
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.end = _UNDECIDED

    def shift(self, by: int) -> None:
        """The text it reads lost its first `by` characters."""
        self.start -= by
        self.pos -= by
        if self.end != _UNDECIDED:
            self.end -= by

    def advance(self, text: str) -> int:
        """Read `text` from where the last call stopped; the index after the object, or
        _UNDECIDED while it is still open."""
        if self.end != _UNDECIDED:
            return self.end
        depth, in_string, escaped = self.depth, self.in_string, self.escaped
        for i in range(self.pos, len(text)):
            ch = text[i]
            if in_string:
                in_string, escaped = _in_string_after(ch, escaped)
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    self.end = i + 1
                    return self.end
        self.pos, self.depth, self.in_string, self.escaped = len(text), depth, in_string, escaped
        return _UNDECIDED


def json_object_end(text: str, start: int) -> int:
    """Return the index after the object that opens at `start`, or _UNDECIDED."""
    return _ObjectScan(start).advance(text)


def completed_json_object(text: str, start: int) -> str | None:
    """The object that opens at `start` and runs to the end of `text` short of its closing
    braces only (a small model's reply often stops one brace early), with them added; None
    when it is closed, or cut inside a string."""
    scan = _ObjectScan(start)
    if scan.advance(text) != _UNDECIDED or scan.in_string:
        return None
    return text[start:].rstrip() + "}" * scan.depth


def salvaged_json_object(text: str, start: int) -> str | None:
    """The object that opens at `start` and is cut short anywhere (inside a string, or in a
    list going round in circles until the reply was closed), as JSON: the member it was cut
    in, and what follows it, dropped, and its brackets closed. None when nothing of it reads.
    The complete members are what the model meant; a half-written one is not (a list of
    time zones repeated until the token bound, a string cut mid-word)."""
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (end of the text kept, what closes it there)
    in_string = escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            in_string, escaped = _in_string_after(ch, escaped)
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            if ch == "{":
                cuts.append((i + 1, "".join(reversed(stack))))
        elif ch in "}]":
            if not stack or stack.pop() != ch or not stack:
                return None  # unbalanced, or closed: not an object cut short
        elif ch == "," and stack and stack[-1] == "}":
            cuts.append((i, "".join(reversed(stack))))
    for end, closing in reversed(cuts[-_SALVAGE_TRIES:]):
        candidate = text[start:end] + closing
        try:
            json.loads(candidate)
        except ValueError:
            continue
        return candidate
    return None


_SALVAGE_TRIES = 8  # each try parses the text kept: a few, from the last member back


def split_control(text: str, keys: frozenset[str]) -> tuple[str, dict[str, Any] | None]:
    """Split a complete reply into (user-facing text, control block or None)."""
    stream = ControlStream(keys)
    stream.feed(text)
    stream.finish()
    return stream.content, stream.control


def read_loose_control(text: str, keys: frozenset[str]) -> tuple[str, dict[str, Any] | None]:
    """The block written as `key: value` text instead of JSON, as small models often do
    ("observation: … should_continue: false"). Found only when a yes/no key is there; returns
    (the text without those parts, the block) or (text, None)."""
    pattern = re.compile(r'["\']?\b(' + "|".join(sorted(keys)) + r')\b["\']?\s*[:=]\s*')
    matches = list(pattern.finditer(text))
    if not matches:
        return text, None
    block: dict[str, Any] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(text)
        line_end = text.find("\n", match.end())
        if line_end != -1:
            end = min(end, line_end)
        block[match.group(1)] = _loose_value(text[match.end() : end])
    if not any(isinstance(block.get(key), bool) for key in _YES_NO_KEYS):
        return text, None  # "I will finish: the report" is prose, not a block
    first = matches[0].start()
    last_line = text.find("\n", matches[-1].end())
    rest = text[:first] + (text[last_line:] if last_line != -1 else "")
    return rest.strip().strip("{}").strip(), block


_YES_NO_KEYS = frozenset({"finish", "should_continue", "done"})


def _loose_value(raw: str) -> Any:
    value = raw.strip().rstrip(",;}").strip()
    try:
        return json.loads(value)
    except ValueError:
        return value.strip("\"'")


def observe_ends_run(block: dict[str, Any]) -> bool:
    """The `answer_after` rule of Observe: text after a block that ends the run is the answer."""
    control = read_observe_control(block)
    return control is not None and not control.should_continue


@dataclass(frozen=True, slots=True)
class ReasonControl:
    plan: str
    tools_to_consider: tuple[str, ...]
    finish: bool


@dataclass(frozen=True, slots=True)
class ObserveControl:
    observation: str
    should_continue: bool
    final_answer: str


def read_reason_control(block: dict[str, Any] | None) -> ReasonControl | None:
    """Read a Reason block leniently; None when there is none (free text)."""
    if block is None:
        return None
    tools = block.get("tools_to_consider")
    names = tuple(str(t) for t in tools) if isinstance(tools, list) else ()
    return ReasonControl(_as_str(block.get("plan")), names, _as_bool(block.get("finish"), False))


def read_observe_control(block: dict[str, Any] | None) -> ObserveControl | None:
    """Read an Observe block leniently; None when there is none (free text)."""
    if block is None:
        return None
    return ObserveControl(
        _as_str(block.get("observation")),
        _as_bool(block.get("should_continue"), True),
        _as_str(block.get("final_answer")),
    )


def _as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _as_bool(value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return default
