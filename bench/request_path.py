"""CPU of the LLM request path alone: `OpenAIChatModel` making a step's three calls.

    python -m bench.request_path [--steps 300] [--profile FILE]

The fake LLM (bench/fake_llm.py, profile "steps") runs in its own process; this process only
runs the adapter, so its CPU time is the request path's: building the body and headers,
sending, reading and parsing the streamed reply. A step is Reason, Act (one tool call) and
Observe over a conversation of 3 to 11 messages with the agent's system prompt. `--profile`
runs the same steps under cProfile with a CPU clock and prints the top functions.
Not part of `python -m bench`: the per-step row there measures the whole server.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from agent.adapters.config import ModelConfig
from agent.adapters.openai_chat import OpenAIChatModel
from agent.messages import Message, ToolCall
from agent.ports import CallInfo, ToolSpec
from bench.procs import ROOT, start_fake_llm

__all__ = ["main"]

_SYSTEM = (ROOT / "prompts" / "agent_system.md").read_text()
_TOOLS = [
    ToolSpec(
        "get_current_time",
        "Return the current time in an IANA time zone.",
        {"type": "object", "properties": {"timezone": {"type": "string"}}},
    )
]


def _conversation(steps: int) -> list[Message]:
    messages = [Message("system", _SYSTEM), Message("user", "What time is it?")]
    for i in range(steps):
        call = ToolCall(f"call_{i}", "get_current_time", '{"timezone": "UTC"}')
        messages.append(Message("assistant", "I will check the time.", tool_calls=(call,)))
        messages.append(Message("tool", "2026-11-23T14:00:00Z", tool_call_id=call.id))
    messages.append(Message("user", "## Now: act"))
    return messages


async def _steps(model: OpenAIChatModel, count: int) -> None:
    for step in range(count):
        messages = _conversation(step % 5)
        for phase in ("reason", "act", "observe"):
            call = CallInfo("bench", "run", step, phase)
            async for _ in model.stream(messages, tools=_TOOLS, call=call):
                pass


async def _measure(address: str, steps: int, profile: str | None) -> None:
    model = OpenAIChatModel(ModelConfig(api_key="k", base_url=f"http://{address}/v1"))
    try:
        await _steps(model, 30)  # warm-up: the connection, imports, caches
        profiler = cProfile.Profile(time.process_time) if profile else None
        cpu = time.process_time()
        if profiler:
            profiler.enable()
        await _steps(model, steps)
        if profiler:
            profiler.disable()
        cpu = time.process_time() - cpu
    finally:
        await model.aclose()
    per_step = cpu * 1000 / steps
    print(f"{steps} steps: CPU per step {per_step:.2f} ms, per call {per_step / 3:.2f} ms")
    if profiler and profile:
        profiler.dump_stats(profile)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--profile", help="write cProfile stats here and print the top")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        llm = start_fake_llm(Path(workdir))
        try:
            asyncio.run(_measure(llm.address, args.steps, args.profile))
        finally:
            llm.stop()


if __name__ == "__main__":
    main()
