"""Tool calls written as text, read as if the model had made them natively.

Small and local models often write a call instead of emitting `tool_calls`: a bare JSON object
`{"name": "get_current_time", "arguments": {...}}`, the same in a ```json fence (or a list of
them), Hermes/Qwen `<tool_call>…</tool_call>` tags, or a reply that is nothing but a call in
function syntax (`get_current_time(timezone="Asia/Tokyo")`, `[get_current_time()]`, or the bare
name). Reason's block written again in Act with a tool's name as its `plan`
(`{"plan": "get_current_time", "tools_to_consider": [...]}`, Qwen2.5-0.5B) is such an object
too. A call object that ends the reply short of its closing braces, as small models often
write it, is completed; one cut inside a member (a list repeated until the reply was closed, a
string cut at the token bound) keeps its whole members. When Act's reply has no native calls,
these forms are recognised, but only for the tools that were offered: anything else stays
text. Function syntax is read with `ast`, never evaluated.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections.abc import Collection
from typing import Any

from agent.messages import ToolCall
from agent.parsing import completed_json_object, json_object_end, salvaged_json_object

__all__ = ["CallTextHold", "read_text_tool_calls"]

_NAME_KEYS = ("name", "tool", "tool_name", "plan")  # "plan": Reason's block repeated in Act
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
_OPEN_TAG, _CLOSE_TAG = "<tool_call>", "</tool_call>"
_MAX_TEXT = 20_000  # a reply longer than this is prose: scanning it for calls could cost seconds
_EMPTY_FENCE = re.compile(r"```(?:json)?\s*```")  # what is left of a fence whose call was read


def read_text_tool_calls(text: str, offered: Collection[str]) -> tuple[tuple[ToolCall, ...], str]:
    """Return (the calls written in `text`, the text without them)."""
    if len(text) > _MAX_TEXT:  # unbalanced braces make the scan quadratic: never on the loop
        return (), text
    whole = _function_syntax(text, offered)
    if whole:
        return whole, ""
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    while pos < len(text):
        start = _next_candidate(text, pos)
        if start == -1:
            break
        end, found = _read_at(text, start, offered)
        if not found:
            kept.append(text[pos : start + 1])
            pos = start + 1
            continue
        kept.append(text[pos:start])
        for call in found:  # small models repeat themselves: one call per name and arguments
            if all((c.name, c.arguments) != (call.name, call.arguments) for c in calls):
                calls.append(call)
        pos = end
    kept.append(text[pos:])
    if not calls:
        return (), text
    return tuple(calls), _EMPTY_FENCE.sub("", "".join(kept)).strip()


def _function_syntax(text: str, offered: Collection[str]) -> tuple[ToolCall, ...]:
    """The whole reply as calls in Python function syntax, or () when it is anything else."""
    source = text.strip().strip("`").strip()
    if not source or len(source) > 4000:
        return ()
    if source.isidentifier():
        source += "()"
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError:
        return ()
    nodes = tree.elts if isinstance(tree, ast.List) else [tree]
    calls = [_function_call(node, offered) for node in nodes]
    if not calls or any(call is None for call in calls):
        return ()
    return tuple(call for call in calls if call is not None)


def _function_call(node: ast.expr, offered: Collection[str]) -> ToolCall | None:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        return None
    if node.func.id not in offered:
        return None
    try:
        arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except ValueError:
        return None
    return ToolCall(f"call_{uuid.uuid4().hex[:24]}", node.func.id, json.dumps(arguments))


def _next_candidate(text: str, pos: int) -> int:
    hits = [i for i in (text.find(_OPEN_TAG, pos), text.find("{", pos), text.find("[", pos))]
    hits = [i for i in hits if i != -1]
    return min(hits) if hits else -1


def _read_at(text: str, start: int, offered: Collection[str]) -> tuple[int, list[ToolCall]]:
    """Read the candidate at `start`; return (end, calls), with no calls when it is none."""
    if text.startswith(_OPEN_TAG, start):
        close = text.find(_CLOSE_TAG, start)
        inner_end = close if close != -1 else len(text)
        inner = text[start + len(_OPEN_TAG) : inner_end].strip()
        end = close + len(_CLOSE_TAG) if close != -1 else len(text)
        return end, _calls(_loads(_unfence(inner)), offered)
    end = _value_end(text, start)
    if end == -1:
        if text[start] != "{":
            return start, []
        completed = completed_json_object(text, start)  # a call cut short of its braces
        calls = _calls(_loads(completed), offered) if completed is not None else []
        if not calls:  # cut inside a member: a call only if some of its arguments are whole
            salvaged = salvaged_json_object(text, start)
            calls = _calls(_loads(salvaged), offered) if salvaged is not None else []
            calls = calls if all(c.arguments not in ("{}", "") for c in calls) else []
        return (len(text), calls) if calls else (start, [])
    return end, _calls(_loads(text[start:end]), offered)


def _value_end(text: str, start: int) -> int:
    if text[start] == "{":
        return json_object_end(text, start)
    depth = 0  # a list of call objects: "[" … "]" with balanced objects inside
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "{":
            end = json_object_end(text, i)
            if end == -1:
                return -1
            i = end
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch not in " \t\r\n,":
            return -1
        i += 1
    return -1


def _unfence(inner: str) -> str:
    if inner.startswith("```"):
        inner = inner.strip("`").strip()
        inner = inner.removeprefix("json").strip()
    return inner


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _calls(value: Any, offered: Collection[str]) -> list[ToolCall]:
    items = value if isinstance(value, list) else [value]
    calls = [_call(item, offered) for item in items]
    if not calls or any(call is None for call in calls):
        return []  # all or nothing: a half-understood list stays text
    return [call for call in calls if call is not None]


def _call(item: Any, offered: Collection[str]) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):  # {"type": "function", "function": {...}}
        item = item["function"]
    name = next((item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
    if name is None or name not in offered:
        return None
    arguments: Any = next((item[k] for k in _ARGUMENT_KEYS if k in item), {})
    if isinstance(arguments, str):
        parsed = _loads(arguments)
        arguments = parsed if isinstance(parsed, dict) else arguments
    if not isinstance(arguments, dict | str):
        return None
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(f"call_{uuid.uuid4().hex[:24]}", name, raw)


class CallTextHold:
    """Streamed text held back while it may be a tool call written as text, so that a reply
    which is a call is never shown as the reply (chat mode streams its text as it comes).

    The reply is held while what it begins with could still become a call's beginning (`{`,
    `[`, `<tool_call>`, a ```json fence, an offered tool's name); text that begins any other
    way is passed on at once, and from then on every piece. What is held is settled once the
    reply is read: `settle` gets the text left once its calls are taken out."""

    def __init__(self, offered: Collection[str]) -> None:
        names = [n for n in offered if n]
        self._starts = ("{", "[", _OPEN_TAG, "```json", "```\n{", "```\n[", *names)
        self._held: list[str] = []
        self._open = False  # the reply began as prose: nothing is held any more
        self.holding = False  # the reply begins like a call: everything waits for `settle`

    def feed(self, piece: str) -> str:
        """What of `piece` (and of what was held) to show now."""
        if self._open:
            return piece
        self._held.append(piece)
        if self.holding:
            return ""
        start = "".join(self._held).lstrip()
        if not start or any(s.startswith(start) for s in self._starts):
            return ""  # too little to tell yet
        if start.startswith(self._starts):
            self.holding = True
            return ""
        self._open = True
        shown, self._held = "".join(self._held), []
        return shown

    def settle(self, without_calls: str | None) -> str:
        """What to show at the end of the reply: the text left once its calls were taken
        out (`without_calls`), or, when it had none (None), all that was held."""
        if self._open:
            return ""  # all of it was shown as it came
        held, self._held = "".join(self._held), []
        return held if without_calls is None else without_calls
