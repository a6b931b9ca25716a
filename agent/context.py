"""ContextWindow: keep every LLM call inside a token budget, predictably.

Per call: budget = window - reserve (room for the answer). In order, until the list fits:
1. every tool result larger than `tool_result_tokens` is cut to its head, with a marker that
   names its result id; the full result stays stored, and `recall_details(result_id, focus)`
   brings back the part the model needs;
2. earlier runs are dropped oldest turn first (a sliding window of recent turns);
3. steps of the current run older than the last `keep_recent_steps` collapse into one-line
   summaries (a step's tool calls and their results always go together).
What was done is returned as a ContextReport, which the loop shows as an `agent_context` event.

A list whose UTF-8 size (an upper bound of its tokens) already fits is returned as it is,
without counting: most calls never need the token tables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as validated_dataclass

from agent.history import build_messages
from agent.messages import Message
from agent.tokens import TokenCounter, message_tokens, message_upper_bound

__all__ = ["RECALL_DETAILS", "ContextLimits", "ContextReport", "ContextWindow", "recall"]

RECALL_DETAILS = "recall_details"
_RECALL_CAP_CHARS = 8000
_CACHE_SIZE = 20_000


@validated_dataclass(frozen=True, slots=True, config=ConfigDict(extra="forbid"))
class ContextLimits:
    """Token budget per LLM call (docs/prompts.md): also the `[context]` settings section.
    A `window_tokens` of 0 disables the budget."""

    window_tokens: Annotated[int, Field(ge=0)] = 32_000  # the model's context window
    reserve_tokens: Annotated[int, Field(ge=0)] = 2_048  # room left for the answer
    # larger tool results are cut (the model may recall_details them)
    tool_result_tokens: Annotated[int, Field(ge=100)] = 2_000
    keep_recent_steps: Annotated[int, Field(ge=1)] = 2  # older steps may collapse to a line

    @model_validator(mode="after")
    def _room_left(self) -> ContextLimits:
        if self.window_tokens and self.reserve_tokens >= self.window_tokens:
            raise ValueError("reserve_tokens must be smaller than window_tokens")
        return self


@dataclass(slots=True)
class ContextReport:
    budget: int
    tokens: int = 0
    exact: bool = False
    compressed: list[dict[str, Any]] = field(default_factory=list)
    dropped_messages: int = 0
    collapsed_steps: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.compressed or self.dropped_messages or self.collapsed_steps)


class ContextWindow:
    def __init__(self, counter: TokenCounter, limits: ContextLimits) -> None:
        self._counter = counter
        self._limits = limits
        self._cache: dict[Message, int] = {}

    @property
    def window_tokens(self) -> int:
        return self._limits.window_tokens

    def build(
        self,
        system: str,
        conversation: Sequence[Message],
        run_id: str,
        extra: Sequence[Message] = (),
        *,
        window_tokens: int | None = None,
    ) -> tuple[list[Message], ContextReport]:
        """The message list for one call, and what had to be done to fit the budget.

        `window_tokens` overrides the configured window (the model server said it is smaller).
        """
        limits = self._limits
        window = window_tokens or limits.window_tokens
        reserve = min(limits.reserve_tokens, window // 4)
        report = ContextReport(window - reserve, exact=self._counter.exact)
        head, *body = build_messages(system, conversation, run_id)
        bound = _fits_by_bytes([head, *body, *extra], report.budget, limits.tool_result_tokens)
        if bound is not None:  # what the steps below would return, unchanged
            report.tokens, report.exact = bound, False
            return [head, *body, *extra], report
        body = [self._cut(m, report) for m in body]
        earlier, current = _split(body, conversation, run_id)
        fixed = self._tokens([head, *extra])
        while earlier and fixed + self._tokens(earlier + current) > report.budget:
            turn = _first_turn(earlier)
            report.dropped_messages += turn
            earlier = earlier[turn:]
        steps = _steps(current)
        while (
            len(steps) > limits.keep_recent_steps + 1
            and fixed + self._tokens(earlier + _flatten(steps)) > report.budget
        ):
            index = next(i for i, s in enumerate(steps[1:], start=1) if not _is_summary(s))
            if index >= len(steps) - limits.keep_recent_steps:
                break
            steps[index] = [_summarize_step(steps[index])]
            report.collapsed_steps += 1
        messages = [head, *earlier, *_flatten(steps), *extra]
        report.tokens = self._tokens(messages)
        return messages, report

    def _tokens(self, messages: Sequence[Message]) -> int:
        """Messages are immutable and re-sent on every call of a run: count each once."""
        cache = self._cache
        if len(cache) > _CACHE_SIZE:
            cache.clear()
        total = 0
        for message in messages:
            tokens = cache.get(message)
            if tokens is None:
                tokens = cache[message] = message_tokens(self._counter, message)
            total += tokens
        return total

    def _cut(self, message: Message, report: ContextReport) -> Message:
        if message.role != "tool" or not message.tool_call_id:
            return message
        limit = self._limits.tool_result_tokens
        if self._tokens([message]) <= limit:  # cached: a quick upper bound of the content
            return message
        size = self._counter.count(message.content)
        if size <= limit:
            return message
        keep = _head(message.content, self._counter, limit)
        report.compressed.append(
            {"result_id": message.tool_call_id, "tokens": size, "kept_tokens": limit}
        )
        marker = (
            f"\n[… cut to fit: this result has {size} tokens. Call {RECALL_DETAILS} with "
            f'result_id "{message.tool_call_id}" and an optional focus to see more.]'
        )
        return _replace(message, keep + marker)


def _fits_by_bytes(messages: list[Message], budget: int, tool_result_tokens: int) -> int | None:
    """The byte bound of `messages` when it fits `budget` and cuts no tool result, else None."""
    total = 0
    for message in messages:
        size = message_upper_bound(message)
        if size > tool_result_tokens and message.role == "tool" and message.tool_call_id:
            return None
        total += size
        if total > budget:
            return None
    return total


def recall(conversation: Sequence[Message], result_id: str, focus: str | None) -> str:
    """The stored result `result_id`, or the lines of it that mention `focus`."""
    for message in reversed(conversation):
        if message.role == "tool" and message.tool_call_id == result_id:
            text = message.content
            if focus:
                text = _focused(text, focus)
            if len(text) > _RECALL_CAP_CHARS:
                text = text[:_RECALL_CAP_CHARS] + "\n[… more: ask with a narrower focus]"
            return text
    raise LookupError(f"There is no stored result with id {result_id!r}.")


def _focused(text: str, focus: str) -> str:
    """The lines that mention the most of the focus words (at least one)."""
    words = [w.lower() for w in focus.split() if len(w) > 1] or [focus.lower()]
    scored = [(sum(w in line.lower() for w in words), line) for line in text.splitlines()]
    best = max((score for score, _ in scored), default=0)
    if best == 0:
        return f"Nothing in this result mentions {focus!r}."
    return "\n".join(line for score, line in scored if score == best)


def _split(
    body: list[Message], conversation: Sequence[Message], run_id: str
) -> tuple[list[Message], list[Message]]:
    """Earlier runs vs the current run (the task message opens the current run)."""
    first = next((i for i, m in enumerate(body) if m.run_id == run_id), len(body))
    return body[:first], body[first:]


def _first_turn(messages: list[Message]) -> int:
    """Length of the oldest turn: up to (not including) the next user message."""
    for i in range(1, len(messages)):
        if messages[i].role == "user" and messages[i].run_id != messages[0].run_id:
            return i
    return len(messages)


def _steps(current: list[Message]) -> list[list[Message]]:
    """[task and notes], then one group per step (a step starts with its reasoning)."""
    groups: list[list[Message]] = [[]]
    for message in current:
        if message.phase == "reason" and groups[-1]:
            groups.append([])
        groups[-1].append(message)
    return groups


def _flatten(groups: list[list[Message]]) -> list[Message]:
    return [m for g in groups for m in g]


def _is_summary(group: list[Message]) -> bool:
    return len(group) == 1 and group[0].phase == "summary"


def _summarize_step(group: list[Message]) -> Message:
    thought = next((_first_sentence(m.content) for m in group if m.phase == "reason"), "")
    observed = next((_first_sentence(m.content) for m in group if m.phase == "observe"), "")
    calls = []
    results = {m.tool_call_id: m for m in group if m.role == "tool"}
    for message in group:
        for call in message.tool_calls:
            result = results.get(call.id)
            outcome = "ok" if result is not None and result.status == "ok" else "failed"
            calls.append(f"{call.name}({call.arguments[:80]}) → {outcome}")
    text = "[Earlier step, summarized] "
    text += f"Thought: {thought} " if thought else ""
    text += f"Calls: {'; '.join(calls)}. " if calls else ""
    text += f"Observed: {observed}" if observed else ""
    return Message("user", text.strip(), phase="summary", run_id=group[0].run_id)


def _first_sentence(text: str) -> str:
    sentence = text.strip().split("\n", 1)[0]
    for end in (". ", "! ", "? "):
        if end in sentence:
            sentence = sentence.split(end, 1)[0] + end.strip()
            break
    return sentence[:200]


def _head(text: str, counter: TokenCounter, limit: int) -> str:
    """The longest prefix of `text` within `limit` tokens (binary search on characters)."""
    low, high = 0, min(len(text), limit * 8)  # no token is longer than 8 characters here
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def _replace(message: Message, content: str) -> Message:
    return dataclasses.replace(message, content=content)
