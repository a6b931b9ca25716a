"""GET /metrics as Prometheus text: the same counts the JSON body has, for scrapers.

Counters are `agent_server_<name>_total`; runs that failed are one counter labelled by error
code (`agent_server_runs_failed_total{code="llm_error"}`); the live figures are gauges.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.metrics import Metric as Counted

__all__ = ["PROMETHEUS_CONTENT_TYPE", "prometheus_text", "wants_prometheus"]

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PREFIX = "agent_server_"


def wants_prometheus(accept: str, query_format: str | None) -> bool:
    """`?format=prometheus`, or an Accept header that asks for text (as Prometheus' own
    scraper does) and not for JSON; anything else, a browser or `curl`, gets JSON."""
    if query_format is not None:
        return query_format == "prometheus"
    accept = accept.lower()
    asks_text = "text/plain" in accept or "application/openmetrics-text" in accept
    return asks_text and "application/json" not in accept


def prometheus_text(
    counts: Mapping[Counted, int],
    gauges: Mapping[str, int],
    labels: Mapping[str, str],
    by_tenant: Mapping[str, Mapping[str, int]] | None = None,
) -> bytes:
    """Every counter (zero when never counted) and gauge, each with `labels` (the tenant);
    and each gauge of `by_tenant` (name -> tenant -> value), one sample per tenant."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(counts, gauges, labels, by_tenant or {}))
    return generate_latest(registry)


class _Snapshot(Collector):
    def __init__(
        self,
        counts: Mapping[Counted, int],
        gauges: Mapping[str, int],
        labels: Mapping[str, str],
        by_tenant: Mapping[str, Mapping[str, int]],
    ) -> None:
        self._counts = counts
        self._gauges = gauges
        self._labels = dict(labels)
        self._by_tenant = by_tenant

    def collect(self) -> Iterator[Metric]:
        names, values = list(self._labels), list(self._labels.values())
        about = "Runs that ended with an error, by code."
        failed = CounterMetricFamily(_PREFIX + "runs_failed", about, labels=[*names, "code"])
        for metric in Counted:
            count = self._counts.get(metric, 0)
            code = metric.failure_code
            if code is not None:
                failed.add_metric([*values, code], count)
                continue
            family = CounterMetricFamily(_PREFIX + metric.value, metric.help, labels=names)
            family.add_metric(values, count)
            yield family
        yield failed
        for name, value in self._gauges.items():
            gauge = GaugeMetricFamily(_PREFIX + name, name.replace("_", " ") + ".", labels=names)
            gauge.add_metric(values, value)
            yield gauge
        for name, per_tenant in self._by_tenant.items():
            about = name.replace("_", " ") + ", by tenant."
            gauge = GaugeMetricFamily(_PREFIX + name, about, labels=["tenant"])
            for tenant, value in sorted(per_tenant.items()):
                gauge.add_metric([tenant], value)
            yield gauge
