"""Phase replies as one JSON object: the schemas the loop asks for, and the stream that reads
them.

Reason and Observe ask for a reply that is one JSON object (`response_format` with a JSON
schema): servers that constrain decoding (llama.cpp, vLLM, OpenAI, Ollama) can then only
produce that shape, so a small model can neither skip the control block nor write our
instructions back as prose. The object's text field for the person (`thought`,
`observation`) streams as it is written, and Observe's `final_answer` streams as the answer
once `should_continue: false` has been read before it.

A server that ignores the schema, or a scripted model, may still answer the older way: prose
and then a JSON block. `PhaseStream` decides on the reply's first character: an object (bare,
or in a ```json fence) is read here; anything else goes to `ControlStream`
(agent/parsing.py), as before.

Act asks for a call as JSON (`call_schema`) only when its native tool call did not come: one
of the offered tools with arguments of its own schema, or `"none"`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agent.parsing import ControlStream
from agent.ports import ToolSpec

__all__ = [
    "NO_TOOL",
    "PhaseStream",
    "call_schema",
    "observe_schema",
    "reason_schema",
]

NO_TOOL = "none"  # Act's structured answer when no tool is needed


def _object(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


_TEXT = {"type": "string"}
_YES_NO = {"type": "boolean"}


def reason_schema(
    tool_names: Sequence[str], *, plan_steps: bool = False, may_finish: bool = True
) -> dict[str, Any]:
    """`{"thought", "plan", "tools_to_consider", "finish"}` (and `plan_steps` when a rolling
    plan is due); the tools are the offered ones. Without `may_finish`, `finish` can only be
    false."""
    names: dict[str, Any] = {"type": "string"}
    if tool_names:
        names["enum"] = list(tool_names)
    properties: dict[str, Any] = {
        "thought": _TEXT,
        "plan": _TEXT,
        "tools_to_consider": {"type": "array", "items": names},
        "finish": _YES_NO if may_finish else {"type": "boolean", "enum": [False]},
    }
    if plan_steps:
        properties["plan_steps"] = {"type": "array", "items": _TEXT}
    return _object("think", properties)


def observe_schema() -> dict[str, Any]:
    """`{"observation", "should_continue", "final_answer"}`, in the order they are read."""
    return _object(
        "look", {"observation": _TEXT, "should_continue": _YES_NO, "final_answer": _TEXT}
    )


def call_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """One call of an offered tool, `{"tool": name, "arguments": {...}}` with the tool's own
    argument schema, or `{"tool": "none"}`. Not strict: tools' schemas have optional fields.
    A tool that requires no argument is asked for its first one: a small model otherwise
    closes the object at once (`get_current_time` with `{}` is the time in UTC)."""
    choices: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"tool": {"const": t.name}, "arguments": _first_required(t.parameters)},
            "required": ["tool", "arguments"],
        }
        for t in tools
    ]
    choices.append(
        {"type": "object", "properties": {"tool": {"const": NO_TOOL}}, "required": ["tool"]}
    )
    schema = {"anyOf": choices}
    return {
        "type": "json_schema",
        "json_schema": {"name": "call", "strict": False, "schema": schema},
    }


def _first_required(schema: dict[str, Any]) -> dict[str, Any]:
    inlined = _inlined(schema)
    properties = inlined.get("properties")
    if isinstance(properties, dict) and properties and not inlined.get("required"):
        inlined["required"] = [next(iter(properties))]
    return inlined


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its local `$ref`s (`#/$defs/X`) replaced by what they name: nested in
    another schema, they would be read against the wrong root."""
    defs = schema.get("$defs", {})

    def walk(node: Any, depth: int) -> Any:
        if isinstance(node, list):
            return [walk(item, depth) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and depth < 8:
            target = defs.get(ref.removeprefix("#/$defs/"))
            if isinstance(target, dict):
                return walk(target, depth + 1)
        return {k: walk(v, depth) for k, v in node.items() if k not in ("$defs", "$ref")}

    return walk(schema, 0)  # type: ignore[no-any-return]


class PhaseStream:
    """Read a streamed Reason or Observe reply; the same surface as `ControlStream`.

    `shown` is the field whose text the person reads as it streams; `answer`, the field that
    is the final answer when `answer_after(block so far)` holds."""

    def __init__(
        self,
        keys: frozenset[str],
        *,
        shown: str,
        answer: str | None = None,
        answer_after: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self._keys = keys
        self._shown_key = shown
        self._answer_key = answer
        self._answer_after = answer_after
        self._lead = ""  # the reply until it shows which form it has
        self._text: ControlStream | None = None  # the older form: prose, then a block
        self._json: _ObjectReader | None = None
        self._answer_out: list[str] = []
        self._answer_taken = 0

    @property
    def is_object(self) -> bool:
        """The reply is one JSON object (known from its first character on)."""
        return self._json is not None

    # -- the ControlStream surface ------------------------------------------------------------

    @property
    def control(self) -> dict[str, Any] | None:
        if self._text is not None:
            return self._text.control
        if self._json is not None and self._json.fields:
            return dict(self._json.fields)
        return None

    @property
    def settled(self) -> bool:
        """The object is complete: nothing after it is read (the model may repeat it)."""
        if self._text is not None:
            return self._text.settled
        return self._json is not None and self._json.closed

    @property
    def content(self) -> str:
        if self._text is not None:
            return self._text.content
        if self._json is None:
            return ""
        shown = self._json.fields.get(self._shown_key)
        return shown.strip() if isinstance(shown, str) else ""

    @property
    def answer(self) -> str:
        if self._text is not None:
            return self._text.answer
        return "".join(self._answer_out).strip()

    def take_answer(self) -> str:
        if self._text is not None:
            return self._text.take_answer()
        new = "".join(self._answer_out[self._answer_taken :])
        if self._answer_taken == 0:
            new = new.lstrip()
            if not new:
                return ""
            self._answer_out = [new]
        self._answer_taken = len(self._answer_out)
        return new

    def feed(self, chunk: str) -> str:
        if self._text is not None:
            return self._text.feed(chunk)
        if self._json is not None:
            return self._read(chunk)
        self._lead += chunk
        start = self._lead.lstrip()
        if not start:
            return ""
        if start.startswith("{"):
            self._json = _ObjectReader(self._shown_key, self._answer_key)
            return self._read(start)
        if start.startswith("```"):
            line, newline, rest = start.partition("\n")
            if not newline:
                return ""  # the fence's label is still coming
            body = rest.lstrip()
            if line.strip() in ("```", "```json") and (body.startswith("{") or not body):
                if not body:
                    return ""
                self._json = _ObjectReader(self._shown_key, self._answer_key)
                return self._read(body)
        self._text = ControlStream(self._keys, answer_after=self._answer_after)
        return self._text.feed(self._lead)

    def finish(self) -> str:
        if self._text is not None:
            return self._text.finish()
        if self._json is None:  # nothing but white space
            self._text = ControlStream(self._keys, answer_after=self._answer_after)
            return self._text.finish()
        held = self._json.held_answer
        if held and self._ends_run():
            self._answer_out.append(held)
            self._json.held_answer = ""
        return ""

    # -- the object form ----------------------------------------------------------------------

    def _read(self, chunk: str) -> str:
        reader = self._json
        assert reader is not None
        shown, answer = reader.feed(chunk, answer_now=self._ends_run)
        if answer:
            self._answer_out.append(answer)
        return shown

    def _ends_run(self) -> bool:
        fields = self._json.fields if self._json is not None else {}
        return self._answer_after is not None and self._answer_after(dict(fields))


class _ObjectReader:
    """An incremental reader of one JSON object's top-level fields, as they stream.

    The string values of `shown` and `answer` are decoded as they come and handed out; every
    field's value is kept in `fields` once read (a string also while it is being written, so
    a reply cut short still has what it wrote). Nested values are kept as parsed JSON."""

    def __init__(self, shown: str, answer: str | None) -> None:
        self._shown = shown
        self._answer = answer
        self.fields: dict[str, Any] = {}
        self.closed = False
        self.held_answer = ""  # answer text read before it was known to be the answer
        self._state = "start"
        self._key: list[str] = []
        self._value: list[str] = []  # the raw text of a non-string value
        self._depth = 0  # nesting inside a non-string value
        self._in_nested_string = False
        self._escape = ""  # an escape being read: "\\", or "\\u" and its digits
        self._current = ""  # the key whose value is being read
        self._high = ""  # the first half of a surrogate pair, waiting for the second

    def feed(self, chunk: str, *, answer_now: Callable[[], bool]) -> tuple[str, str]:
        """(new text of the shown field, new text of the answer) in `chunk`."""
        shown: list[str] = []
        answer: list[str] = []
        for char in chunk:
            if self.closed:
                break
            out = self._step(char)
            if not out:
                continue
            if self._current == self._shown:
                shown.append(out)
            elif self._current == self._answer:
                if answer_now():
                    if self.held_answer:
                        answer.append(self.held_answer)
                        self.held_answer = ""
                    answer.append(out)
                else:
                    self.held_answer += out
        return "".join(shown), "".join(answer)

    def _step(self, char: str) -> str:
        """Advance by one character; return the decoded text it adds to a string value."""
        state = self._state
        if state == "start":
            if char == "{":
                self._state = "key_wait"
            return ""
        if state == "key_wait":
            if char == '"':
                self._key, self._state = [], "key"
            elif char == "}":
                self.closed = True
            return ""
        if state == "key":
            if self._escape:
                self._key.append(char)
                self._escape = ""
            elif char == "\\":
                self._escape = "\\"
            elif char == '"':
                self._current = "".join(self._key)
                self._state = "colon"
            else:
                self._key.append(char)
            return ""
        if state == "colon":
            if char == ":":
                self._state = "value_wait"
            return ""
        if state == "value_wait":
            if char.isspace():
                return ""
            if char == '"':
                self.fields[self._current] = ""
                self._state = "string"
                return ""
            self._value, self._depth, self._state = [char], 0, "value"
            if char in "[{":
                self._depth = 1
            return ""
        if state == "string":
            return self._string_char(char)
        return self._value_char(char)

    def _string_char(self, char: str) -> str:
        escape = self._escape
        if escape:
            if escape == "\\" and char != "u":
                self._escape = ""
                decoded = _ESCAPES.get(char, char)
                return self._add(decoded)
            self._escape = escape + char
            if len(self._escape) < 6:  # \uXXXX
                return ""
            self._escape = ""
            try:
                decoded = chr(int((escape + char)[2:], 16))
            except ValueError:
                return ""
            return self._add(decoded)
        if char == "\\":
            self._escape = "\\"
            return ""
        if char == '"':
            self._state = "key_wait"
            return ""
        return self._add(char)

    def _add(self, text: str) -> str:
        """Add decoded text to the current string; a UTF-16 surrogate pair written as two
        escapes becomes its one character (a lone half is dropped: it cannot be sent)."""
        if self._high:
            high, self._high = self._high, ""
            if "\udc00" <= text <= "\udfff":
                text = (high + text).encode("utf-16", "surrogatepass").decode("utf-16")
        if len(text) == 1 and "\ud800" <= text <= "\udbff":
            self._high = text
            return ""
        if len(text) == 1 and "\udc00" <= text <= "\udfff":
            return ""
        self.fields[self._current] = self.fields.get(self._current, "") + text
        return text

    def _value_char(self, char: str) -> str:
        if self._depth == 0 and char in ",}":
            self._keep_value()
            if char == "}":
                self.closed = True
            self._state = "key_wait"
            return ""
        self._value.append(char)
        if self._in_nested_string:
            if self._escape:
                self._escape = ""
            elif char == "\\":
                self._escape = "\\"
            elif char == '"':
                self._in_nested_string = False
        elif char == '"':
            self._in_nested_string = True
        elif char in "[{":
            self._depth += 1
        elif char in "]}":
            self._depth -= 1
            if self._depth == 0:
                self._keep_value()
                self._state = "key_wait"
        return ""

    def _keep_value(self) -> None:
        raw = "".join(self._value).strip()
        self._value = []
        if not raw:
            return
        try:
            self.fields[self._current] = json.loads(raw)
        except ValueError:
            self.fields[self._current] = raw


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}
