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
import operator
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Self

from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as validated_dataclass

from agent.history import build_messages
from agent.messages import Message
from agent.tokens import TokenCounter, message_tokens, message_upper_bound

__all__ = [
    "RECALL_DETAILS",
    "ContextLimits",
    "ContextReport",
    "ContextWindow",
    "EarlierTurns",
    "recall",
]

RECALL_DETAILS = "recall_details"
_RECALL_CAP_CHARS = 8000
_CACHE_SIZE = 20_000
# Large results cut lately: every call of a run sends them again, and cutting one counts its
# tokens some fifteen times (a run reading five 230 KB files spent 80 ms per call on it).
# Each keeps only its cut head (~16 KB at the default `tool_result_tokens`).
_CUTS_KEPT = 64


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


class EarlierTurns:
    """The turns before a run as its calls send them. They stay the same for every call of the
    run, so they are built once (and counted once, when a call does not fit by bytes) instead
    of at every call: a long session has thousands of messages before the run. One per run,
    used with one `ContextWindow`."""

    __slots__ = ("body", "bytes", "counted", "run_id", "source")

    def __init__(self) -> None:
        self.source: tuple[Message, ...] = ()  # the conversation's messages before the run
        self.run_id: str | None = None
        self.body: list[Message] = []  # the same, as the model sees them
        self.bytes: int | None = 0  # their byte bound (None: a tool result may need a cut)
        self.counted: _Counted | None = None

    def of(self, conversation: Sequence[Message], run_id: str, tool_result_tokens: int) -> Self:
        """These turns, built again unless `conversation` still begins with them and goes on
        with the run (a run only appends to its conversation)."""
        known = len(self.source)
        if (
            self.run_id == run_id
            and known <= len(conversation)
            and (known == len(conversation) or conversation[known].run_id == run_id)
            and all(map(operator.is_, self.source, conversation))
        ):
            return self
        first = next((i for i, m in enumerate(conversation) if m.run_id == run_id), None)
        self.source = tuple(conversation[:first])
        self.run_id = run_id
        self.body = build_messages("", self.source, run_id)[1:]
        self.bytes = _byte_bound(self.body, tool_result_tokens)
        self.counted = None
        return self


@dataclass(frozen=True, slots=True)
class _Counted:
    body: list[Message]  # earlier turns with their large results cut
    compressed: list[dict[str, Any]]  # the cuts, as a report lists them
    turn_starts: list[int]  # where each turn begins in `body`, and its length at the end
    dropped_tokens: list[int]  # tokens of the turns before each of `turn_starts`

    @property
    def tokens(self) -> int:
        return self.dropped_tokens[-1]


class ContextWindow:
    def __init__(self, counter: TokenCounter, limits: ContextLimits) -> None:
        self._counter = counter
        self._limits = limits
        # Keyed by digests, not by the messages: a key would keep a message's text alive (a
        # process that has counted many large results would hold them all). Two messages
        # with one digest (64-bit hashes and the same length) are not to be expected.
        self._cache: dict[tuple[int, int], int] = {}
        self._cuts: dict[tuple[str, int, int], tuple[Message | None, dict[str, Any] | None]] = {}

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
        earlier: EarlierTurns | None = None,
    ) -> tuple[list[Message], ContextReport]:
        """The message list for one call, and what had to be done to fit the budget.

        `window_tokens` overrides the configured window (the model server said it is smaller).
        `earlier` keeps what the run's calls share (the turns before the run); give each run
        its own, or the turns are built and counted again at every call.
        """
        limits = self._limits
        window = window_tokens or limits.window_tokens
        reserve = min(limits.reserve_tokens, window // 4)
        report = ContextReport(window - reserve, exact=self._counter.exact)
        earlier = (earlier or EarlierTurns()).of(conversation, run_id, limits.tool_result_tokens)
        head, *current = build_messages(system, conversation[len(earlier.source) :], run_id)
        bound = _byte_bound([head, *current, *extra], limits.tool_result_tokens)
        if bound is not None:
            bound = None if earlier.bytes is None else bound + earlier.bytes
        if bound is not None and bound <= report.budget:  # what the steps below would return
            report.tokens, report.exact = bound, False
            return [head, *earlier.body, *current, *extra], report
        counted = self._counted(earlier, report)
        current = [self._cut(m, report) for m in current]
        steps = _steps(current)
        step_sizes = [self._tokens(step) for step in steps]
        rest = self._tokens((head, *extra)) + sum(step_sizes)
        # Oldest turns first, until the rest fits: by the turns' running totals (a long
        # session drops hundreds of turns per call; recounting after each was quadratic).
        turns = min(
            bisect_left(counted.dropped_tokens, rest + counted.tokens - report.budget),
            len(counted.turn_starts) - 1,
        )
        report.dropped_messages = counted.turn_starts[turns]
        total = rest + counted.tokens - counted.dropped_tokens[turns]
        collapsible = (i for i, s in enumerate(steps[1:], start=1) if not _is_summary(s))
        while len(steps) > limits.keep_recent_steps + 1 and total > report.budget:
            index = next(collapsible, len(steps))  # none left: nothing more to collapse
            if index >= len(steps) - limits.keep_recent_steps:
                break
            steps[index] = [_summarize_step(steps[index])]
            summary = self._tokens(steps[index])
            total += summary - step_sizes[index]
            step_sizes[index] = summary
            report.collapsed_steps += 1
        report.tokens = total
        kept = counted.body[report.dropped_messages :]
        return [head, *kept, *_flatten(steps), *extra], report

    def _counted(self, earlier: EarlierTurns, report: ContextReport) -> _Counted:
        """The earlier turns cut and counted (at a run's first call that needs it), their
        cuts added to `report`."""
        counted = earlier.counted
        if counted is None:
            cuts = ContextReport(0)
            body = [self._cut(m, cuts) for m in earlier.body]
            starts, dropped = [0], [0]
            while starts[-1] < len(body):
                end = _turn_end(body, starts[-1])
                dropped.append(dropped[-1] + self._tokens(body[starts[-1] : end]))
                starts.append(end)
            counted = earlier.counted = _Counted(body, cuts.compressed, starts, dropped)
        report.compressed.extend(dict(entry) for entry in counted.compressed)
        return counted

    def _tokens(self, messages: Sequence[Message]) -> int:
        """Messages are immutable and re-sent on every call of a run: count each once."""
        cache = self._cache
        if len(cache) > _CACHE_SIZE:
            cache.clear()
        total = 0
        for message in messages:
            key = (hash(message), len(message.content))
            tokens = cache.get(key)
            if tokens is None:
                tokens = cache[key] = message_tokens(self._counter, message)
            total += tokens
        return total

    def _cut(self, message: Message, report: ContextReport) -> Message:
        if message.role != "tool" or not message.tool_call_id:
            return message
        limit = self._limits.tool_result_tokens
        if self._tokens([message]) <= limit:  # cached: a quick upper bound of the content
            return message
        key = (message.tool_call_id, len(message.content), hash(message.content))
        cut = self._cuts.get(key)
        if cut is None:
            cut = self._cuts[key] = self._cut_anew(message, limit)
            if len(self._cuts) > _CUTS_KEPT:
                del self._cuts[next(iter(self._cuts))]
        shortened, entry = cut
        if shortened is None or entry is None:
            return message
        report.compressed.append(dict(entry))
        return shortened

    def _cut_anew(
        self, message: Message, limit: int
    ) -> tuple[Message | None, dict[str, Any] | None]:
        """The result cut to `limit` tokens, and what a report says of it (None: it fits)."""
        size = self._counter.count(message.content)
        if size <= limit:
            return None, None
        keep = _head(message.content, self._counter, limit)
        marker = (
            f"\n[… cut to fit: this result has {size} tokens. Call {RECALL_DETAILS} with "
            f'result_id "{message.tool_call_id}" and an optional focus to see more.]'
        )
        entry = {"result_id": message.tool_call_id, "tokens": size, "kept_tokens": limit}
        return _replace(message, keep + marker), entry


def _byte_bound(messages: Sequence[Message], tool_result_tokens: int) -> int | None:
    """An upper bound of the tokens of `messages`, or None when a tool result may be too
    large to go uncut (then only counting can tell)."""
    total = 0
    for message in messages:
        size = message_upper_bound(message)
        if size > tool_result_tokens and message.role == "tool" and message.tool_call_id:
            return None
        total += size
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


def _turn_end(messages: list[Message], start: int) -> int:
    """Where the turn opening at `start` ends: at the next user message of another run."""
    run_id = messages[start].run_id
    for i in range(start + 1, len(messages)):
        if messages[i].role == "user" and messages[i].run_id != run_id:
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
