"""TenantMetrics: run counters kept per tenant, so GET /metrics shows a tenant only its own."""

from __future__ import annotations

from collections import defaultdict

from agent.metrics import Metrics

__all__ = ["TenantMetrics"]


class TenantMetrics:
    """Hand each run its tenant's counters; read them per tenant or summed."""

    def __init__(self) -> None:
        self._by_tenant: defaultdict[str, Metrics] = defaultdict(Metrics)

    def of(self, tenant: str) -> Metrics:
        """The live counters of `tenant`, for its runs to increment."""
        return self._by_tenant[tenant]

    def snapshot(self, tenant: str | None = None) -> Metrics:
        """A copy of one tenant's counters, or (None) of all tenants' summed."""
        if tenant is not None:
            return Metrics(self._by_tenant.get(tenant, {}))
        total = Metrics()
        for counters in self._by_tenant.values():
            total.update(counters)
        return total
