"""ContextWindow: keep every LLM call inside a token budget, predictably.

Per call: budget = window - reserve (room for the answer). Every part of the call gives way
but the system message, the phase's instruction and the user's task. In order, until the list
fits:
1. every tool result larger than `tool_result_tokens` (or a quarter of the budget, if less) is
   cut to its head, with a marker that names its result id and where the cut is; the full
   result stays stored, and `recall_details(result_id, offset=…)` reads on from there
   (agent/recall.py);
2. earlier runs are dropped oldest turn first (a sliding window of recent turns);
3. steps of the current run older than the last `keep_recent_steps` collapse into one-line
   summaries (a step's tool calls and their results always go together);
4. those summaries are left out, oldest first, and one line says how many steps were;
5. then the same for the recent steps, all but the last one;
6. then the results of the steps still shown are cut further, to what is left.
What was done is returned as a ContextReport, which the loop shows as an `agent_context` event.
The phase's instruction is kept whole: what in it grows with the run (the list of calls so far,
the failed calls) is kept within its own room by agent/ledger.py.

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

import orjson
from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as validated_dataclass

from agent.history import build_messages
from agent.messages import Message
from agent.ports import ToolSpec
from agent.steps import StepGroups, split_steps
from agent.tokens import TokenCounter, message_tokens, message_upper_bound

__all__ = [
    "RECALL_DETAILS",
    "ContextLimits",
    "ContextReport",
    "ContextWindow",
    "EarlierTurns",
]

RECALL_DETAILS = "recall_details"
_MIN_RESULT_TOKENS = 50  # a result cut to make room keeps at least this much of its head
_MARKER_TOKENS = 80  # what a cut marker adds to a result, at most
_PIECE_MARGIN = 60  # of a recalled piece's limit: its header and footer lines
_TOOL_OVERHEAD = 8  # a schema's framing in the prompt, beyond its name, text and parameters
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
    collapsed_steps: int = 0  # steps of the run shown as one-line summaries
    dropped_steps: int = 0  # steps of the run left out, counted in one line

    @property
    def changed(self) -> bool:
        return bool(
            self.compressed or self.dropped_messages or self.collapsed_steps or self.dropped_steps
        )


class EarlierTurns:
    """The turns before a run as its calls send them. They stay the same for every call of the
    run, so they are built once (and counted once, when a call does not fit by bytes) instead
    of at every call: a long session has thousands of messages before the run. One per run,
    used with one `ContextWindow`."""

    __slots__ = ("body", "bytes", "counted", "cut_at", "run_id", "source")

    def __init__(self) -> None:
        self.source: tuple[Message, ...] = ()  # the conversation's messages before the run
        self.run_id: str | None = None
        self.cut_at = 0  # the size results are cut to (it shrinks with the window)
        self.body: list[Message] = []  # the same, as the model sees them
        self.bytes: int | None = 0  # their byte bound (None: a tool result may need a cut)
        self.counted: _Counted | None = None

    def of(self, conversation: Sequence[Message], run_id: str, cut_at: int) -> Self:
        """These turns, built again unless `conversation` still begins with them and goes on
        with the run (a run only appends to its conversation), and results are cut as before."""
        known = len(self.source)
        if (
            self.run_id == run_id
            and self.cut_at == cut_at
            and known <= len(conversation)
            and (known == len(conversation) or conversation[known].run_id == run_id)
            and all(map(operator.is_, self.source, conversation))
        ):
            return self
        first = next((i for i, m in enumerate(conversation) if m.run_id == run_id), None)
        self.source = tuple(conversation[:first])
        self.run_id = run_id
        self.cut_at = cut_at
        self.body = build_messages("", self.source, run_id)[1:]
        self.bytes = _byte_bound(self.body, cut_at)
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
        self._cuts: dict[
            tuple[str, int, int, int], tuple[Message | None, dict[str, Any] | None]
        ] = {}

    @property
    def window_tokens(self) -> int:
        return self._limits.window_tokens

    def result_tokens(self, window_tokens: int | None = None) -> int:
        """What one tool result may keep uncut: `tool_result_tokens`, or a quarter of the
        budget when that is less (a small window holds a few results, not one)."""
        window = window_tokens or self._limits.window_tokens
        budget = window - min(self._limits.reserve_tokens, window // 4)
        return max(100, min(self._limits.tool_result_tokens, budget // 4))

    def list_chars(self, window_tokens: int | None = None) -> int:
        """The characters a list that grows with the run (the calls so far in Act's state)
        may take in a phase's instruction: about an eighth of the budget; 0: no limit."""
        window = window_tokens or self._limits.window_tokens
        return (window - min(self._limits.reserve_tokens, window // 4)) // 2

    def tool_tokens(self, specs: Sequence[ToolSpec]) -> int:
        """What a call's tool list takes of the window (a chat template writes the schemas
        into the prompt): their names, descriptions and parameters, counted."""
        return sum(
            _TOOL_OVERHEAD
            + self._counter.count(f"{s.name} {s.description} {orjson.dumps(s.parameters).decode()}")
            for s in specs
        )

    def piece(self, text: str, window_tokens: int | None = None) -> str:
        """The longest head of `text` one recalled piece may hold: a piece with its header
        and footer is a result that is never cut."""
        limit = self.result_tokens(window_tokens) - _PIECE_MARGIN
        if self._counter.count(text) <= limit:  # a piece is short: mostly it fits whole
            return text
        return _head(text, self._counter, limit)

    def build(
        self,
        system: str,
        conversation: Sequence[Message],
        run_id: str,
        extra: Sequence[Message] = (),
        *,
        window_tokens: int | None = None,
        earlier: EarlierTurns | None = None,
        tool_tokens: int = 0,
        own_thinking: bool = True,
    ) -> tuple[list[Message], ContextReport]:
        """The message list for one call, and what had to be done to fit the budget.

        `window_tokens` overrides the configured window (the model server said it is smaller).
        `tool_tokens` is what the call's tool list takes (`tool_tokens()`): it fits too.
        `earlier` keeps what the run's calls share (the turns before the run); give each run
        its own, or the turns are built and counted again at every call.
        """
        limits = self._limits
        window = window_tokens or limits.window_tokens
        reserve = min(limits.reserve_tokens, window // 4)
        report = ContextReport(window - reserve, exact=self._counter.exact)
        cut_at = self.result_tokens(window)
        earlier = (earlier or EarlierTurns()).of(conversation, run_id, cut_at)
        head, *current = build_messages(
            system, conversation[len(earlier.source) :], run_id, own_thinking=own_thinking
        )
        bound = _byte_bound([head, *current, *extra], cut_at)
        if bound is not None:
            bound = None if earlier.bytes is None else bound + earlier.bytes + tool_tokens
        if bound is not None and bound <= report.budget:  # what the steps below would return
            report.tokens, report.exact = bound, False
            return [head, *earlier.body, *current, *extra], report
        counted = self._counted(earlier, report, cut_at)
        current = [self._cut(m, report, cut_at) for m in current]
        groups = StepGroups(self._tokens, split_steps(current))
        fixed = self._tokens((head, *extra)) + tool_tokens
        rest = fixed + groups.total
        # Oldest turns first, until the rest fits: by the turns' running totals (a long
        # session drops hundreds of turns per call; recounting after each was quadratic).
        turns = min(
            bisect_left(counted.dropped_tokens, rest + counted.tokens - report.budget),
            len(counted.turn_starts) - 1,
        )
        report.dropped_messages = counted.turn_starts[turns]
        kept_tokens = counted.tokens - counted.dropped_tokens[turns]
        room = report.budget - fixed - kept_tokens
        self._fit_steps(groups, room, report)
        report.tokens = fixed + kept_tokens + groups.total
        kept = counted.body[report.dropped_messages :]
        return [head, *kept, *groups.messages(), *extra], report

    def _fit_steps(self, groups: StepGroups, room: int, report: ContextReport) -> None:
        """Fit the run's steps in `room`: collapse old steps, then leave their summaries out
        (oldest first), then the same for recent steps but the last, then cut results."""
        for keep in dict.fromkeys((self._limits.keep_recent_steps, 1)):
            last = len(groups.steps) - keep  # the steps before this one may give way
            for index in range(1, last):
                if groups.total <= room:
                    return
                if groups.collapse(index):
                    report.collapsed_steps += 1
            for index in range(1, last):
                if groups.total <= room:
                    return
                if groups.drop(index):
                    report.collapsed_steps -= 1
                    report.dropped_steps += 1
        if groups.total > room:
            self._cut_further(groups, room, report)

    def _cut_further(self, groups: StepGroups, room: int, report: ContextReport) -> None:
        """Cut the results still shown to one size, so that they fit what is left."""
        results = [
            (g, i)
            for g, step in enumerate(groups.steps)
            for i, m in enumerate(step)
            if m.role == "tool" and m.tool_call_id
        ]
        if not results:
            return
        sizes = sum(self._tokens([groups.steps[g][i]]) for g, i in results)
        share = (sizes - (groups.total - room)) // len(results) - _MARKER_TOKENS
        limit = max(_MIN_RESULT_TOKENS, share)
        for g, i in results:
            step = list(groups.steps[g])
            step[i] = self._cut(step[i], report, limit)
            groups.replace(g, step)

    def _counted(self, earlier: EarlierTurns, report: ContextReport, cut_at: int) -> _Counted:
        """The earlier turns cut and counted (at a run's first call that needs it), their
        cuts added to `report`."""
        counted = earlier.counted
        if counted is None:
            cuts = ContextReport(0)
            body = [self._cut(m, cuts, cut_at) for m in earlier.body]
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

    def _cut(self, message: Message, report: ContextReport, limit: int) -> Message:
        if message.role != "tool" or not message.tool_call_id:
            return message
        if self._tokens([message]) <= limit:  # cached: a quick upper bound of the content
            return message
        key = (message.tool_call_id, len(message.content), hash(message.content), limit)
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
            f"\n[… cut to fit: this result has {size} tokens; this is its first "
            f"{len(keep)} of {len(message.content)} characters. Call {RECALL_DETAILS} with "
            f'result_id "{message.tool_call_id}" and offset {len(keep)} to read on, or a '
            "focus to find what you need.]"
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


def _turn_end(messages: list[Message], start: int) -> int:
    """Where the turn opening at `start` ends: at the next user message of another run."""
    run_id = messages[start].run_id
    for i in range(start + 1, len(messages)):
        if messages[i].role == "user" and messages[i].run_id != run_id:
            return i
    return len(messages)


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
