"""StorageQuota: how many bytes of conversations each tenant may keep in the store.

Checked when a run starts (a `chat`, `retry` / `continue`, an AG-UI run): a tenant whose
stored events and messages (`SessionStore.stored_bytes`) have reached `storage.max_bytes_per_tenant`
starts no run until some are deleted. A run under way is never cut short, so a tenant may
pass the quota by what her last run stores.
"""

from __future__ import annotations

import logging

from agent.errors import StorageError
from server.protocol import ProtocolError
from server.storage.base import Scope, SessionStore
from server.storage.outage import outage_of

__all__ = ["StorageQuota"]

log = logging.getLogger(__name__)


class StorageQuota:
    """Refuse a tenant's new runs once her stored bytes reach `limit` (0: no limit)."""

    def __init__(self, store: SessionStore, limit: int) -> None:
        self._store = store
        self._limit = limit

    async def check(self, scope: Scope) -> None:
        """Raise ProtocolError("storage_quota_exceeded") when the tenant is at the quota. A
        store that cannot say lets the run go on: it meets the store's failure itself."""
        outage = outage_of(self._store)
        if not self._limit or (outage is not None and outage.exhausted):
            return  # an exhausted store: the run is refused as `storage_unavailable` at once
        try:
            used = (await self._store.stored_bytes(scope.tenant_id)).get(scope.tenant_id, 0)
        except StorageError as exc:
            log.warning("The stored bytes of tenant %s could not be read: %s", scope.tenant_id, exc)
            return
        if used >= self._limit:
            raise ProtocolError(
                "storage_quota_exceeded",
                f"Your organization's conversations take {used:,} bytes, its quota is "
                f"{self._limit:,}: delete some before starting another run.",
            )
