"""Metric names live in one place; Prometheus text is served only to a client that asks."""

from __future__ import annotations

import pytest

from agent.metrics import Metric
from server.metrics import prometheus_text, wants_prometheus


@pytest.mark.parametrize(
    ("accept", "query", "expected"),
    [
        ("text/plain;version=0.0.4;q=0.3,*/*;q=0.1", None, True),  # Prometheus' scraper
        ("application/openmetrics-text;version=1.0.0,text/plain;q=0.5", None, True),
        ("*/*", None, False),  # curl
        ("text/html,application/xhtml+xml,*/*;q=0.8", None, False),  # a browser
        ("application/json, text/plain, */*", None, False),  # asks for JSON too
        ("", "prometheus", True),
        ("text/plain", "json", False),  # the query wins
    ],
)
def test_prometheus_text_is_served_when_asked_for(accept: str, query: str | None, expected: bool):
    assert wants_prometheus(accept, query) is expected


def test_failures_are_one_counter_labelled_by_code():
    assert Metric.run_failed("llm_error") is Metric.RUNS_FAILED_LLM_ERROR
    assert Metric.RUNS_FAILED_LLM_ERROR.failure_code == "llm_error"
    assert Metric.RUNS_STARTED.failure_code is None
    with pytest.raises(ValueError):
        Metric.run_failed("no_such_code")
    text = prometheus_text({Metric.RUNS_FAILED_INTERNAL_ERROR: 3}, {"runs_active": 1}, {}).decode()
    lines = text.splitlines()
    assert 'agent_server_runs_failed_total{code="internal_error"} 3.0' in lines
    assert "agent_server_runs_failed_internal_error_total 3.0" not in lines
    assert "agent_server_runs_active 1.0" in lines
    assert "agent_server_runs_started_total 0.0" in lines  # every counter, even at zero
