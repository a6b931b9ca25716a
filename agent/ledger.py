"""CallLedger: what the run's tool calls did, so the loop can be honest about it.

It answers three questions: which failures are still unresolved (a failed call not followed
by any successful call later in the run), whether a call is an identical repeat of one that
already failed, and what the current state looks like in plain words for the prompts and for
the verifier.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["CallLedger", "CallRecord", "REPEAT_LIMIT"]

REPEAT_LIMIT = 2  # an identical call that failed this often is not run again
_RESULT_PREVIEW = 400


@dataclass(frozen=True, slots=True)
class CallRecord:
    step: int
    name: str
    arguments: dict[str, Any]
    ok: bool
    detail: str  # the error, or a short preview of the result

    @property
    def label(self) -> str:
        args = json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)
        return f"{self.name}({args})"


class CallLedger:
    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    def record(
        self, step: int, name: str, arguments: dict[str, Any], ok: bool, detail: Any
    ) -> None:
        text = detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
        if ok and len(text) > _RESULT_PREVIEW:
            text = text[:_RESULT_PREVIEW] + "…"
        self.records.append(CallRecord(step, name, arguments, ok, text))

    def unresolved_failures(self) -> list[CallRecord]:
        """Failures with no successful call after them."""
        last_success = max((i for i, r in enumerate(self.records) if r.ok), default=-1)
        return [r for i, r in enumerate(self.records) if not r.ok and i > last_success]

    def failures_of(self, name: str, arguments: dict[str, Any]) -> int:
        key = _key(name, arguments)
        return sum(1 for r in self.records if not r.ok and _key(r.name, r.arguments) == key)

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
            "unresolved.\n" + "\n".join(lines)
        )

    def summary(self) -> str:
        """Every call of the run with its outcome, for the verifier and the Act state."""
        if not self.records:
            return "No tool was called in this run."
        lines = []
        for r in self.records:
            outcome = f"succeeded: {r.detail}" if r.ok else f"FAILED: {r.detail}"
            lines.append(f"- step {r.step}: {r.label} {outcome}")
        return "\n".join(lines)


def _key(name: str, arguments: dict[str, Any]) -> str:
    return name + json.dumps(arguments, sort_keys=True, ensure_ascii=False)
