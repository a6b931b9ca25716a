"""Model and tool calls become OpenTelemetry spans named by the GenAI semantic conventions
when an SDK is installed (the server installs one for `[telemetry] otlp_endpoint`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agent.tools.current_time import make_current_time_tool
from server.settings import TelemetrySettings
from server.telemetry import configure_tracing
from tests.fakes.openai_server import FakeToolCall, act, observe
from tests.fakes.scripted_model import Harness
from tests.fakes.tools import echo_tool


class _ArmedExporter(InMemorySpanExporter):
    """Keeps spans only while a test of this module runs (the provider outlives it)."""

    armed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return super().export(spans) if self.armed else SpanExportResult.SUCCESS


_EXPORTER = _ArmedExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider can be set once: the first test sets it, all share it."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    _EXPORTER.armed = True
    yield _EXPORTER
    _EXPORTER.armed = False
    _EXPORTER.clear()


async def test_model_and_tool_calls_are_spans(spans: InMemorySpanExporter):
    harness = Harness(tools=[make_current_time_tool(), echo_tool])
    good = FakeToolCall("get_current_time", {"timezone": "UTC"})
    bad = FakeToolCall("echo", {"text": "fail"})
    harness.model.script("act", act(good, bad))
    harness.model.script("observe", observe("One failed.", final="Done."))
    await harness.run("time?")

    finished = spans.get_finished_spans()
    chats = [s for s in finished if s.name == "chat"]
    assert [s.attributes["agent_server.phase"] for s in chats] == harness.model.phases()
    first = chats[0]
    assert first.kind is SpanKind.CLIENT
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.conversation.id"] == "s1"
    assert first.attributes["gen_ai.usage.input_tokens"] == 10
    assert first.attributes["gen_ai.usage.output_tokens"] == 5
    tools = {s.name: s for s in finished if s.name.startswith("execute_tool ")}
    assert set(tools) == {"execute_tool get_current_time", "execute_tool echo"}
    ok, failed = tools["execute_tool get_current_time"], tools["execute_tool echo"]
    assert ok.attributes["gen_ai.tool.call.id"] == good.id
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["error.type"] == "tool_error"
    assert "asked to fail" in (failed.status.description or "")


def test_no_endpoint_installs_nothing():
    assert configure_tracing(TelemetrySettings()) is None
