"""Tools for tests: real Tool objects whose timing the test controls."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from agent.errors import ToolError
from agent.ports import ToolContext
from agent.tools.base import Tool


class WaitArgs(BaseModel):
    label: str = ""


class Gate:
    """A tool that blocks until the test opens the gate; records starts and cancellations."""

    def __init__(self, name: str = "wait_for_gate") -> None:
        self.started = asyncio.Event()
        self.opened = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.calls: list[str] = []

        async def run(args: WaitArgs, context: ToolContext) -> Any:
            self.calls.append(args.label)
            self.started.set()
            try:
                await self.opened.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return {"label": args.label, "done": True}

        self.tool = Tool(name, "Wait until released.", WaitArgs, run)


class EchoArgs(BaseModel):
    text: str
    delay_ms: int = 0


async def _echo(args: EchoArgs, context: ToolContext) -> Any:
    await asyncio.sleep(args.delay_ms / 1000)
    if args.text == "fail":
        raise ToolError("echo was asked to fail")
    if args.text == "crash":
        raise RuntimeError("boom")
    return {"echo": args.text}


echo_tool = Tool("echo", "Echo the text back after an optional delay.", EchoArgs, _echo)


class FlakyArgs(BaseModel):
    city: str


class Flaky:
    """A weather-like tool that fails for the cities listed in `broken`; counts real runs."""

    def __init__(self, broken: set[str]) -> None:
        self.broken = broken
        self.runs: list[str] = []

        async def run(args: FlakyArgs, context: ToolContext) -> Any:
            self.runs.append(args.city)
            if args.city in self.broken:
                raise ToolError(f"The weather service has no data for {args.city}.")
            return {"city": args.city, "forecast": "sunny"}

        self.tool = Tool("weather", "Get the weather forecast for a city.", FlakyArgs, run)
