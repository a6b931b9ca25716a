"""The plain loop a user would pick instead: the OpenAI Agents SDK's `Runner`, with the same
tools (the very tools our server builds from the same config, called in this process), on the
same model server. Its instructions are the ordinary ones: who it is, today's date, use tools.

Runner's defaults are kept (10 turns); a task that caps our steps caps its turns at one more
than those steps, the tool rounds plus the answer.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from agent.acting import REQUEST_INPUT_SPEC
from agent.ports import ToolContext, ToolSpec
from agent.tools.catalog import ToolCatalog
from agent.tools.extractor import ExtractorPool
from agent.tools.http_client import create_http_client
from bench.eval.ours import eval_config
from bench.eval.record import Record
from bench.eval.tasks import Loop, Outcome, Task
from server.app import _tools  # the same tool set the server builds
from server.settings import load_settings
from server.storage.memory_sqlite import SQLiteMemoryStore

__all__ = ["PlainLoop"]

INSTRUCTIONS = (
    "You are a helpful assistant. Use the tools when they help answer the user's request. "
    "Today is {today} (UTC)."
)


class PlainLoop(Loop):
    name = "openai-agents Runner"

    def __init__(self, workdir: Path, base_url: str, model: str, page_port: int) -> None:
        super().__init__(workdir, base_url, model, page_port)
        self._catalog: ToolCatalog | None = None

    async def astart(self) -> None:
        set_tracing_disabled(True)
        settings = load_settings(eval_config(self._workdir, self._page_port), environ={})
        self._memory = SQLiteMemoryStore(self._workdir / "plain-memory.db")
        await self._memory.open()
        fetch = settings.tools.web_fetch
        self._http = create_http_client(timeout_s=fetch.timeout_s)
        self._extractor = ExtractorPool(fetch.extract_workers, fetch.extract_memory_mb)
        self._catalog = _tools(
            settings, None, http=self._http, memory=self._memory, extractor=self._extractor
        )
        self._client = AsyncOpenAI(base_url=self._base_url, api_key="unused", max_retries=2)

    def tool_texts(self) -> list[str]:
        """Every description of the tools, and of their parameters, as the model reads them."""
        assert self._catalog is not None
        texts: list[str] = []
        for spec in [*self._catalog.specs(None), REQUEST_INPUT_SPEC]:
            texts.append(spec.description)
            texts.extend(_descriptions(spec.parameters))
        return texts

    async def astop(self) -> None:
        await self._client.close()
        await self._http.aclose()
        await self._extractor.aclose()
        await self._memory.close()

    def _function(self, spec: ToolSpec, outcome: Outcome, answers: list[str]) -> FunctionTool:
        catalog = self._catalog
        assert catalog is not None

        async def invoke(_ctx: Any, raw: str) -> str:
            call: dict[str, Any] = {"name": spec.name, "arguments": raw, "ok": False}
            outcome.calls.append(call)
            try:
                arguments = json.loads(raw or "{}")
            except ValueError:
                call["result"] = "Error: the arguments are not valid JSON."
                return str(call["result"])
            call["arguments"] = arguments
            if spec.name == REQUEST_INPUT_SPEC.name:
                call["ok"] = True
                call["result"] = answers.pop(0) if answers else "I don't know, do what you can."
                return str(call["result"])
            context = ToolContext("local", "local", "plain", "plain")
            try:
                result = await catalog.call(spec.name, arguments, context)
            except Exception as exc:  # noqa: BLE001 - the model reads every failure
                call["result"] = f"Error: {exc}"
                return str(call["result"])
            call["ok"], call["result"] = True, result
            return json.dumps(result, ensure_ascii=False, default=str)

        return FunctionTool(
            name=spec.name,
            description=spec.description,
            params_json_schema=spec.parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    async def _turn(self, content: str, task: Task, answers: list[str], record: Record) -> Outcome:
        assert self._catalog is not None
        outcome = Outcome(started=time.time())
        specs = [*self._catalog.specs(None), REQUEST_INPUT_SPEC]
        agent = Agent(
            name="assistant",
            instructions=INSTRUCTIONS.format(today=datetime.now(UTC).date().isoformat()),
            tools=[self._function(s, outcome, answers) for s in specs],
            model=OpenAIChatCompletionsModel(model=self._model, openai_client=self._client),
            model_settings=ModelSettings(include_usage=True),
        )
        max_turns = 10 if task.max_steps is None else task.max_steps + 1
        sent = time.time()
        result = Runner.run_streamed(agent, content, max_turns=max_turns)
        call_text_started: float | None = None
        try:
            async for event in result.stream_events():
                if event.type != "raw_response_event":
                    continue
                kind = getattr(event.data, "type", "")
                if kind == "response.created":
                    call_text_started = None
                elif kind == "response.output_text.delta" and call_text_started is None:
                    call_text_started = time.time()
            outcome.answer = str(result.final_output or "")
            outcome.done = bool(outcome.answer.strip())
            outcome.stop_reason = "finished"
        except MaxTurnsExceeded:
            outcome.stop_reason = "max_turns"
            outcome.error = "MaxTurnsExceeded"
        except Exception as exc:  # noqa: BLE001 - a failed run is a result here
            outcome.error = f"{type(exc).__name__}: {exc}"[:300]
        outcome.ended = time.time()
        usage = result.context_wrapper.usage
        record.model_calls += usage.requests
        record.prompt_tokens += usage.input_tokens
        record.completion_tokens += usage.output_tokens
        record.steps += sum(1 for c in outcome.calls)
        if outcome.done and call_text_started is not None:
            record.first_answer_s = call_text_started - sent
        record.shown.append(outcome.answer)
        return outcome


def _descriptions(schema: Any) -> list[str]:
    if isinstance(schema, list):
        return [text for item in schema for text in _descriptions(item)]
    if not isinstance(schema, dict):
        return []
    found = [schema["description"]] if isinstance(schema.get("description"), str) else []
    return found + [text for value in schema.values() for text in _descriptions(value)]
