"""CallLedger: what the run's tool calls did, so the loop can be honest about it.

It answers four questions: which failures are still unresolved (a failed call not followed
by any successful call later in the run), whether a call is an identical repeat of one that
already failed, whether the run is stuck (its last steps only repeated calls that had already
failed the same way), and what the current state looks like in plain words for the prompts
and for the verifier. What it writes for the prompts fits the room the context budget gives
it: the newest calls are kept, and the older ones are counted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["CallLedger", "CallRecord", "REPEAT_LIMIT"]

REPEAT_LIMIT = 2  # an identical call that failed this often is not run again
_RESULT_PREVIEW = 400
_ARGUMENTS_PREVIEW = 200  # of a call's arguments in the lists the prompts show
_REFUSED = "This exact call already failed"
_WORD = re.compile(r"\w+")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|«[^»]*»|“[^”]*”")


@dataclass(frozen=True, slots=True)
class CallRecord:
    step: int
    name: str
    arguments: dict[str, Any]
    ok: bool
    detail: str  # the error, or a short preview of the result
    repeat: bool = False  # a failure that repeats an earlier one (see `CallLedger.record`)

    @property
    def label(self) -> str:
        args = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)
        if len(args) > _ARGUMENTS_PREVIEW:
            args = args[:_ARGUMENTS_PREVIEW] + "…"
        return f"{self.name}({args})"


class CallLedger:
    def __init__(self, room_chars: int = 0) -> None:
        self.records: list[CallRecord] = []
        self.room_chars = room_chars  # of the call list in a prompt; 0: no limit

    def record(
        self, step: int, name: str, arguments: dict[str, Any], ok: bool, detail: Any
    ) -> None:
        """Add a call's outcome. A failure is a repeat when an earlier call of the same tool
        with the same or nearly the same arguments (one word more, one less) failed the same
        way, or when it was refused as an identical repeat: a model that varies a failing
        search word by word is as stuck as one that repeats it."""
        text = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
        if len(text) > _RESULT_PREVIEW:
            text = text[:_RESULT_PREVIEW] + "…"
        repeat = not ok and (
            text.startswith(_REFUSED)
            or any(_same_failure(r, name, arguments, text) for r in self.records if not r.ok)
        )
        self.records.append(CallRecord(step, name, arguments, ok, text, repeat))

    def unresolved_failures(self) -> list[CallRecord]:
        """Failures with no successful call after them."""
        last_success = max((i for i, r in enumerate(self.records) if r.ok), default=-1)
        return [r for i, r in enumerate(self.records) if not r.ok and i > last_success]

    def failures_of(self, name: str, arguments: dict[str, Any]) -> int:
        key = _key(name, arguments)
        return sum(1 for r in self.records if not r.ok and _key(r.name, r.arguments) == key)

    def refusal(self, name: str, arguments: dict[str, Any]) -> str | None:
        """Why this call is not run (an identical call failed REPEAT_LIMIT times), or None."""
        failures = self.failures_of(name, arguments)
        if failures < REPEAT_LIMIT:
            return None
        return (
            f"{_REFUSED} {failures} times in this run, so it was not run again. Try a "
            "different approach or tell the person what went wrong."
        )

    def stuck(self, step: int, steps: int) -> bool:
        """True when each of the last `steps` steps up to `step` made calls, and every one of
        them was a repeat of a failure (`steps` 0: never)."""
        if steps <= 0 or step < steps:
            return False
        for s in range(step - steps + 1, step + 1):
            made = [r for r in self.records if r.step == s]
            if not made or not all(r.repeat for r in made):
                return False
        return True

    def successes(self) -> list[CallRecord]:
        return [r for r in self.records if r.ok]

    def failure_note(self) -> str:
        """An unmissable note naming every unresolved failure, or "" when there is none."""
        failures = self.unresolved_failures()
        if not failures:
            return ""
        lines = [f"- step {r.step}: {r.label} failed: {r.detail}" for r in failures]
        return (
            "## Attention: tool calls that failed\n"
            "These calls did NOT succeed. Say so plainly to the person, and try a different "
            "approach (another tool, other arguments, or asking the person). Never repeat a "
            "failed call unchanged, and never claim the task is done while these are "
            "unresolved.\n" + _newest(lines, self.room_chars // 2, "failed calls")
        )

    def failure_list(self) -> str:
        """The unresolved failures, one line each (the newest that fit), or "None."."""
        lines = [f"- {r.label}: {r.detail}" for r in self.unresolved_failures()]
        return _newest(lines, self.room_chars // 2, "failed calls") if lines else "None."

    def summary(self) -> str:
        """Every call of the run with its outcome (the newest that fit `room_chars`, the
        others counted), for the verifier and the Act state."""
        if not self.records:
            return "No tool was called in this run."
        lines = []
        for r in self.records:
            outcome = f"succeeded: {r.detail}" if r.ok else f"FAILED: {r.detail}"
            lines.append(f"- step {r.step}: {r.label} {outcome}")
        return _newest(lines, self.room_chars, "calls")


def _newest(lines: list[str], room: int, what: str) -> str:
    """The last `lines` that fit in `room` characters (at least one), after a line counting
    the ones left out; all of them when `room` is 0."""
    if not room:
        return "\n".join(lines)
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if kept and used + len(line) + 1 > room:
            break
        kept.append(line)
        used += len(line) + 1
    left_out = len(lines) - len(kept)
    if left_out:
        kept.append(f"({left_out} earlier {what} left out to save room.)")
    return "\n".join(reversed(kept))


def _key(name: str, arguments: dict[str, Any]) -> str:
    return name + json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _same_failure(earlier: CallRecord, name: str, arguments: dict[str, Any], error: str) -> bool:
    return (
        earlier.name == name
        and _near(earlier.arguments, arguments)
        and _failure_kind(earlier.detail, earlier.arguments) == _failure_kind(error, arguments)
    )


def _near(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same arguments, but for texts that share most of their words (one contains the
    other's, or half of all their words are common)."""
    if a.keys() != b.keys():
        return False
    for key, x in a.items():
        y = b[key]
        if x == y:
            continue
        tx, ty = _texts(x), _texts(y)
        if not (tx and ty):
            return False
        wx, wy = set(_WORD.findall(" ".join(tx).lower())), set(_WORD.findall(" ".join(ty).lower()))
        if not (wx and wy and (wx <= wy or wy <= wx or 2 * len(wx & wy) >= len(wx | wy))):
            return False
    return True


def _failure_kind(error: str, arguments: dict[str, Any]) -> str:
    """The error without what names the call's own input (its argument values, anything
    quoted): two calls that differ by a word fail the same way when these are equal."""
    text = error
    values = [t for v in arguments.values() for t in (_texts(v) or [str(v)])]
    values = sorted((v for v in values if v and v != "None"), key=len)
    for value in reversed(values):
        text = text.replace(value, "")
    text = _QUOTED.sub("", text)
    return " ".join(text.lower().split())


def _texts(value: Any) -> list[str]:
    """The texts in an argument value (a string, or strings in lists and objects), as text;
    [] when it holds anything else (a number, a flag): those must match exactly."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        parts = [_texts(item) for item in value]
        return [t for p in parts for t in p] if all(parts) else []
    if isinstance(value, dict):
        return _texts(list(value.values()))
    return []
