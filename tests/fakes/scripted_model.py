"""In-process fakes of the loop's ports: a ScriptedModel (`ChatModel`), an in-memory
EventSink/Transcript, and `Harness`, which drives `run_agent`/`run_chat` through them.

No sockets and no server: these test the loop's logic fast. The wire is tested end to end
with `tests/fakes/openai_server.py` and a real uvicorn server. Replies reuse that fake's
`Reply` and its helpers (`reason`, `act`, `observe`, `text`), scripted per phase the same way.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent.chat import run_chat
from agent.control import RunControl
from agent.errors import ModelError
from agent.events import AgentEvent
from agent.loop import run_agent
from agent.messages import Message, ToolCall
from agent.metrics import Metrics
from agent.ports import CallInfo, ModelTurn, Thinking, ToolChoice, ToolSpec
from agent.prompts import FilePromptProvider
from agent.run import RunContext, RunLimits
from agent.tools.base import Tool
from agent.tools.registry import ToolRegistry
from tests.fakes.openai_server import Reply, _default

E = TypeVar("E")


@dataclass
class ModelCall:
    """One call the loop made: what it sent."""

    phase: str
    step: int
    messages: list[Message]
    tools: list[ToolSpec]
    tool_choice: ToolChoice
    response_format: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None


class ScriptedModel:
    """A `ChatModel` answering from per-phase scripts (defaults like FakeLLM's when a phase's
    script is empty). A `Reply` with `status` raises ModelError; with `hang_after`, the stream
    waits after that many chunks until the run cancels it."""

    def __init__(self) -> None:
        self.scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self.calls: list[ModelCall] = []
        self.cancelled = 0
        self.closed_early = 0  # streams the loop closed before their last chunk
        self.hanging = asyncio.Event()  # set when a stream starts to hang
        self.structured_output = False  # True: plays a server that constrains decoding

    def script(self, phase: str, *replies: Reply) -> None:
        self.scripts[phase].extend(replies)

    def phases(self) -> list[str]:
        return [c.phase for c in self.calls]

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec],
        call: CallInfo,
        tool_choice: ToolChoice = "auto",
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AsyncIterator[str | Thinking | ModelTurn]:
        made = ModelCall(
            call.phase,
            call.step,
            list(messages),
            list(tools),
            tool_choice,
            response_format,
            max_tokens,
            temperature,
        )
        self.calls.append(made)
        queue = self.scripts.get(call.phase)
        reply = queue.popleft() if queue else _default(call.phase)
        if reply.status is not None:
            raise ModelError(f"the fake model answered HTTP {reply.status}")
        try:
            for thought in reply.reasoning:
                yield Thinking(thought)
            for i, chunk in enumerate(reply.chunks):
                if reply.hang_after is not None and i >= reply.hang_after:
                    self.hanging.set()
                    await asyncio.Event().wait()  # until cancelled
                yield chunk
            if reply.hang_after is not None and reply.hang_after >= len(reply.chunks):
                self.hanging.set()
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        except GeneratorExit:
            self.closed_early += 1
            raise
        calls = tuple(ToolCall(c.id, c.name, c.raw_arguments()) for c in reply.tool_calls)
        yield ModelTurn(
            "".join(reply.chunks),
            calls,
            reply.prompt_tokens,
            reply.completion_tokens,
            "tool_calls" if calls else "stop",
        )


@dataclass
class Recorder:
    """An in-memory EventSink and Transcript: what a store would hold, in order."""

    events: list[AgentEvent] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    emitted: asyncio.Event = field(default_factory=asyncio.Event)

    async def emit(self, event: AgentEvent) -> None:
        self.events.append(event)
        self.emitted.set()

    async def emit_all(self, events: Sequence[AgentEvent]) -> None:
        self.events.extend(events)
        self.emitted.set()

    async def append(self, messages: Sequence[Message]) -> None:
        self.messages.extend(messages)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_for(self, done: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait (bounded) until `done()` holds, re-checking after every emitted event."""
        async with asyncio.timeout(timeout):
            while not done():
                self.emitted.clear()
                await self.emitted.wait()


_PROMPTS = FilePromptProvider()


@dataclass
class Harness:
    """One session's worth of ports; `run` drives one run to its end in this event loop."""

    model: ScriptedModel = field(default_factory=ScriptedModel)
    tools: list[Tool] = field(default_factory=list)
    record: Recorder = field(default_factory=Recorder)
    control: RunControl = field(default_factory=RunControl)
    metrics: Metrics = field(default_factory=Metrics)

    def context(self, limits: RunLimits | None = None, run_id: str = "r1") -> RunContext:
        return RunContext(
            session_id="s1",
            run_id=run_id,
            tenant_id="acme",
            user_id="alice",
            model=self.model,
            tools=ToolRegistry(self.tools),
            prompts=_PROMPTS,
            sink=self.record,
            transcript=self.record,
            control=self.control,
            limits=limits or RunLimits(),
            metrics=self.metrics,
        )

    def start(self, content: str, *, agent: bool = True, **limits: Any) -> asyncio.Task[None]:
        """Start a run on `content` as a task the control can stop, as the server does."""
        # As the server does: the user's message is stored, then the run reads the history.
        ctx = self.context(RunLimits(**limits))
        self.record.messages.append(Message("user", content, run_id=ctx.run_id))
        runner: Callable[[RunContext, Sequence[Message]], Awaitable[None]]
        runner = run_agent if agent else run_chat
        history = list(self.record.messages)
        task = asyncio.ensure_future(runner(ctx, history))
        self.control.attach(task)  # type: ignore[arg-type]
        return task

    async def run(self, content: str, *, agent: bool = True, **limits: Any) -> Recorder:
        async with asyncio.timeout(10):
            await self.start(content, agent=agent, **limits)
        return self.record
