"""OpenTelemetry spans for model and tool calls, named by the GenAI semantic conventions.

Only the OpenTelemetry API is used here: without a configured SDK (the server sets one up
when `[telemetry] otlp_endpoint` is set) no span is started at all: the API's no-op spans
still attach and detach a context per call, a few percent of a step's CPU.
A model call is a CLIENT span `chat {model}`; a tool call an INTERNAL span
`execute_tool {name}`; both carry the session, run, step and phase of the agent.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN,
    ProxyTracerProvider,
    Span,
    SpanKind,
    Status,
    StatusCode,
)

from agent.ports import ModelTurn

__all__ = ["model_call_span", "record_tool_failure", "record_turn", "tool_call_span"]

_TRACER_NAME = "agent-server"


def _untraced() -> bool:
    """No tracer provider was installed: every span would be a no-op."""
    return isinstance(trace.get_tracer_provider(), ProxyTracerProvider)


def model_call_span(
    model: str | None, *, session_id: str, run_id: str, step: int, phase: str
) -> AbstractContextManager[Span]:
    """Trace one model call; an exception leaving it marks the span as failed."""
    if _untraced():
        return nullcontext(INVALID_SPAN)
    attributes: dict[str, str | int] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": session_id,
        "agent_server.run.id": run_id,
        "agent_server.step": step,
        "agent_server.phase": phase,
    }
    if model:
        attributes["gen_ai.request.model"] = model
    name = f"chat {model}" if model else "chat"
    tracer = trace.get_tracer(_TRACER_NAME)
    return tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes)


def record_turn(span: Span, turn: ModelTurn) -> None:
    """Usage and finish reason of a completed call."""
    span.set_attribute("gen_ai.usage.input_tokens", turn.prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", turn.completion_tokens)
    if turn.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [turn.finish_reason])


def tool_call_span(
    name: str, call_id: str, *, run_id: str, step: int
) -> AbstractContextManager[Span]:
    """Trace one tool call (the tool's own spans, e.g. HTTP, nest inside it)."""
    if _untraced():
        return nullcontext(INVALID_SPAN)
    attributes: dict[str, str | int] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "agent_server.run.id": run_id,
        "agent_server.step": step,
    }
    tracer = trace.get_tracer(_TRACER_NAME)
    return tracer.start_as_current_span(
        f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes
    )


def record_tool_failure(span: Span, error: str, error_type: str) -> None:
    """A tool call that failed without raising (its error is fed back to the model)."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, error))
