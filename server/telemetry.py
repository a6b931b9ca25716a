"""OpenTelemetry tracing for `agent-server serve`, when `[telemetry] otlp_endpoint` is set.

The agent's spans (agent/tracing.py: `chat {model}`, `execute_tool {name}`, GenAI semantic
conventions) go through the OpenTelemetry API; this module installs the SDK behind it, with
a batching OTLP/HTTP exporter. The SDK and exporter are the `otel` extra
(`pip install 'agent-server[otel]'`); without them a configured endpoint is a ConfigError.
"""

from __future__ import annotations

from collections.abc import Callable

from server.settings import ConfigError, TelemetrySettings

__all__ = ["configure_tracing"]


def configure_tracing(settings: TelemetrySettings) -> Callable[[], None] | None:
    """Install the process's tracer provider; return the function that flushes and stops it
    (call it at exit), or None when no exporter is configured."""
    if not settings.otlp_endpoint:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(
            "telemetry.otlp_endpoint needs the OpenTelemetry SDK and OTLP exporter: "
            f"pip install 'agent-server[otel]' ({exc})"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(settings.otlp_endpoint)))
    trace.set_tracer_provider(provider)
    return provider.shutdown
