"""call_model: one model call of a run, drained in one place.

Every phase (Reason, Act, Observe, summarize, repair, chat) calls the model the same way: the
text goes to the caller's `on_text`, a reasoning model's thinking becomes `ThinkingDelta`
events (never text, never sent back), usage is counted, and a prompt the server refuses as
too long for its context window is compacted once to the window the server named (or half the
current one) and sent again. A second refusal ends the run with an error that says what to do.

A caller may also say when it has read enough (`enough`: a small model repeating its control
block). The call is then closed at once, so the server stops generating; its tokens are not
reported by the server, so they are estimated from the messages sent and the text read. A call
a stop cuts short is counted the same way: the model server has worked on it, and the usage an
`agent_stopped` reports includes it.

A reply that goes on past `RunLimits.reply_max_chars` (a model in a loop, on a server with no
output limit) is closed the same way, its text ending with a note that says it was cut: the
events that carry a reply's whole text stay well under the 1 MiB a WebSocket client takes.
A character that JSON escapes as six (a control character) counts six.
Thinking counts toward the same limit: a model thinking without end is cut like one talking.
A reply going round in circles (agent/repetition.py) is closed the same way, in any phase.

Every call is bounded: without `[llm] max_tokens`, each phase has its own bound
(`PHASE_MAX_TOKENS`), so no call runs until the model server's context is full. Before a
run's first call, the model server is asked for its context window (llama.cpp `/props`,
vLLM `/v1/models`); a window smaller than the configured one is the one the run fits.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import orjson

from agent.errors import ContextTooLong, ModelError
from agent.events import ThinkingDelta
from agent.messages import Message
from agent.metrics import Metric
from agent.ports import ModelTurn, Thinking, ToolChoice, ToolSpec
from agent.repetition import RepeatWatch
from agent.run import RunContext, RunRecorder
from agent.tokens import EstimatedCounter, message_tokens
from agent.tracing import model_call_span, record_turn

__all__ = ["AGENT_TEMPERATURE", "PHASE_MAX_TOKENS", "call_model"]

# Each phase's bound on a reply when `[llm] max_tokens` is unset: room for what the phase
# writes (a final answer in Observe and the summary, a long reply in chat), none for a loop.
PHASE_MAX_TOKENS = {
    "reason": 1024,
    "act": 1024,
    "observe": 2048,
    "summarize": 2048,
    "chat": 4096,
}
_OTHER_PHASE_MAX_TOKENS = 1024

# The agent's phases read results and write calls: when `[llm] temperature` is unset, they
# sample near the most likely token rather than at the model server's default (0.8 on
# llama.cpp), where Qwen2.5-0.5B wrote "23 °C" for a time it had just read (docs/eval.md).
# Chat and titles keep the server's default.
AGENT_TEMPERATURE = 0.2
_AGENT_PHASES = frozenset({"reason", "act", "observe", "summarize", "repair", "verify"})

TextSink = Callable[[str], Awaitable[None]]
Enough = Callable[[], bool]

_ESTIMATE = EstimatedCounter()
_CUT_NOTE = "\n\n[Cut here: the reply went on past {:,} characters; the rest was not read.]"
_LOOP_NOTE = "\n\n[Cut here: the reply began to repeat itself.]"


async def call_model(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    phase: str,
    build: Callable[[], Awaitable[list[Message]]],
    *,
    tools: Sequence[ToolSpec] = (),
    tool_choice: ToolChoice = "auto",
    response_format: dict[str, object] | None = None,
    on_text: TextSink | None = None,
    enough: Enough | None = None,
) -> ModelTurn:
    """Build the messages with `build`, make the call, and return the whole turn (what was
    read of it, when `enough` said so after some text)."""
    most = ctx.limits.reply_max_chars
    if not rec.window_asked:
        rec.window_asked = True
        ask = getattr(ctx.model, "context_window", None)  # optional: not part of the port
        if ask is not None:
            rec.fit_window(await ask())
    shape = _Shape(
        tools,
        tool_choice,
        response_format,
        PHASE_MAX_TOKENS.get(phase, _OTHER_PHASE_MAX_TOKENS),
        AGENT_TEMPERATURE if phase in _AGENT_PHASES else None,
    )
    try:
        return await _drain(
            ctx, rec, step, phase, await build(), shape, _Reader(on_text, enough, most)
        )
    except ContextTooLong as exc:
        if not rec.shrink_window(exc.window_tokens):
            raise ModelError(_too_small(exc.window_tokens)) from exc
        ctx.metrics[Metric.CONTEXT_OVERFLOW_RETRIES] += 1
    try:
        return await _drain(
            ctx, rec, step, phase, await build(), shape, _Reader(on_text, enough, most)
        )
    except ContextTooLong as exc:
        raise ModelError(_too_small(exc.window_tokens or rec.window_tokens)) from exc


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a call asks of the model besides its messages."""

    tools: Sequence[ToolSpec]
    tool_choice: ToolChoice
    response_format: dict[str, object] | None
    max_tokens: int
    temperature: float | None


async def _drain(
    ctx: RunContext,
    rec: RunRecorder,
    step: int,
    phase: str,
    messages: list[Message],
    shape: _Shape,
    reader: _Reader,
) -> ModelTurn:
    turn: ModelTurn | None = None  # the model's own, with its usage, once it came
    model = getattr(ctx.model, "model_name", None)  # optional: not part of the port
    with model_call_span(
        model if isinstance(model, str) else None,
        session_id=ctx.session_id,
        run_id=ctx.run_id,
        step=step,
        phase=phase,
    ) as span:
        tools = shape.tools
        stream = ctx.model.stream(
            messages,
            tools=tools,
            call=ctx.call(step, phase),
            tool_choice=shape.tool_choice,
            response_format=shape.response_format,
            max_tokens=shape.max_tokens,
            temperature=shape.temperature,
        )
        try:
            async for item in stream:
                if isinstance(item, ModelTurn):
                    turn = item
                    continue
                if isinstance(item, Thinking):
                    thought, too_long = reader.thinking(item.text)
                    if thought:
                        await ctx.sink.emit(ThinkingDelta(step, phase, thought))
                    done = too_long and await reader.text("", cut=True)  # the note says so
                else:
                    done = await reader.text(item)
                if done:
                    await _close(stream)
                    turn = reader.cut_turn(messages, tools)
                    ctx.metrics[Metric.REPLIES_CUT] += 1
                    ctx.metrics[Metric.REPLIES_LOOPING] += reader.looping
                    break
        except asyncio.CancelledError:  # a stop: the usage it reports counts this call too
            rec.count(phase, turn if turn is not None else reader.cut_turn(messages, tools))
            raise
        turn = turn if turn is not None else ModelTurn("")
        record_turn(span, turn)
    rec.count(phase, turn)
    return turn


class _Reader:
    """Hands a call's text to the caller and keeps it, to estimate the call's tokens if it is
    cut short (by `enough`, by its length, or by a stop)."""

    def __init__(self, on_text: TextSink | None, enough: Enough | None, most: int) -> None:
        self._on_text = on_text
        self._enough = enough
        self._text: list[str] = []
        self._most = most
        self._room = most  # characters the reply may still have (see `_size`)
        self._watch = RepeatWatch()
        self.looping = False  # the reply was closed because it went round in circles

    async def text(self, piece: str, *, cut: bool = False) -> bool:
        """Pass `piece` on; True when the caller has read enough of the reply, or the reply
        is too long or going round in circles, or `cut` says so (its text then ends with a
        note that says so)."""
        size = _size(piece)
        too_long = cut or size > self._room
        if too_long:
            piece = _within(piece, size, self._room) + _CUT_NOTE.format(self._most)
        elif self._watch.feed(piece):
            self.looping = too_long = True
            piece += _LOOP_NOTE
        self._room -= size
        self._text.append(piece)
        if self._on_text is not None:
            await self._on_text(piece)
        return too_long or (self._enough is not None and self._enough())

    def thinking(self, piece: str) -> tuple[str, bool]:
        """What to show of a piece of thinking, and whether the reply is now too long (the
        caller then passes on the note that says so with `text("", cut=True)`)."""
        size = _size(piece)
        if size < self._room:
            self._room -= size
            return piece, False
        piece, self._room = _within(piece, size, self._room), 0
        return piece, True

    @property
    def read(self) -> str:
        return "".join(self._text)

    def cut_turn(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelTurn:
        """The turn of a reply closed early or cut by a stop: the server sent no usage, so
        estimate it."""
        content = self.read
        prompt = sum(message_tokens(_ESTIMATE, m) for m in messages) + sum(
            _ESTIMATE.count(f"{t.name} {t.description} {orjson.dumps(t.parameters).decode()}")
            for t in tools
        )
        return ModelTurn(content, (), prompt, _ESTIMATE.count(content), "stop", estimated=True)


# Characters JSON writes as a six-character escape (`\u0001`, a lone surrogate): a reply of
# them is six times its length on the wire, so each counts six toward the limit.
_ESCAPED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")


def _size(piece: str) -> int:
    """`piece`'s length as the limit counts it: as long as it is in a frame, near enough
    (other characters take at most four bytes, or two for an escaped newline or quote)."""
    if _ESCAPED.search(piece) is None:  # nearly every piece: no list built
        return len(piece)
    return len(piece) + 5 * len(_ESCAPED.findall(piece))


def _within(piece: str, size: int, room: int) -> str:
    """The beginning of `piece` that fits in `room` (exactly for plain text, else safely)."""
    return piece[:room] if size == len(piece) else piece[: max(0, room // 6)]


async def _close(stream: AsyncIterator[object]) -> None:
    """Close the model's stream now (not when it is collected): the request ends with it."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def _too_small(window: int | None) -> str:
    size = f" ({window} tokens)" if window else ""
    return (
        f"The conversation does not fit the model's context window{size}, even shortened. "
        "Give the model server a larger context (llama.cpp: --ctx-size; Ollama: num_ctx), "
        "or start a new chat."
    )
