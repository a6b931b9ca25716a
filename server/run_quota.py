"""RunQuota: how many runs each tenant may have working at once, and start a minute.

This process counts its own runs per tenant. On a shared store a run also takes slots there
(one per session, one of the tenant's limit), so the limit holds across processes; the run
gives them back when it ends. Starts are counted per process: a tenant that starts and stops
runs in a loop would otherwise fill the store at the speed of the disk.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Literal

from agent.errors import StorageError
from agent.rate import TokenBuckets
from server.live import now_ms
from server.protocol import ProtocolError
from server.storage.base import RunCoordination, Scope
from server.storage.outage import StoreUnavailable

__all__ = ["RunQuota", "run_in_progress"]

log = logging.getLogger(__name__)


def run_in_progress() -> ProtocolError:
    return ProtocolError(
        "run_in_progress", "A run is already active in this session; stop it first."
    )


def _too_many_runs(active: int) -> ProtocolError:
    return ProtocolError(
        "too_many_runs",
        f"Your organization already has {active} active runs, the limit; wait for one to finish.",
    )


def _started_too_fast(per_minute: int) -> ProtocolError:
    return ProtocolError(
        "too_many_runs",
        f"Your organization starts runs faster than {per_minute} a minute, the limit; "
        "wait a few seconds.",
    )


class RunQuota:
    """Count each tenant's working runs against `limit`, here and (shared store) in the store,
    and its run starts against `starts_per_minute` (0: none), in bursts of a sixth of it."""

    def __init__(self, store: RunCoordination, limit: int, starts_per_minute: int = 0) -> None:
        self._store = store
        self._limit = limit
        self._active: Counter[str] = Counter()
        self._per_minute = starts_per_minute
        self._starts = TokenBuckets(starts_per_minute / 60, max(1, starts_per_minute // 6))

    def active_runs(self, tenant: str | None = None) -> int:
        """Runs currently working, of one tenant or (None) across tenants."""
        return sum(self._active.values()) if tenant is None else self._active[tenant]

    def reserve(self, tenant: str) -> None:
        """Count a run of `tenant`; raise ProtocolError("too_many_runs") at the limit, or
        when the tenant starts runs faster than allowed."""
        if self._active[tenant] >= self._limit:
            raise _too_many_runs(self._active[tenant])
        if self._per_minute and self._starts.take(tenant):
            raise _started_too_fast(self._per_minute)
        self._active[tenant] += 1

    def release(self, tenant: str) -> None:
        """Stop counting a run `reserve` counted."""
        self._active[tenant] -= 1

    async def take_slot(self, scope: Scope, session_id: str, run_id: str) -> None:
        """Take the run's slots in the shared store; when refused (or interrupted), release
        the reservation and raise ProtocolError. A store that fails is let through: the run's
        first write fails too and ends it with `storage_error`, as it should; one away past
        `storage.outage_tolerance_s` raises StoreUnavailable (nothing is started)."""
        refused: Literal["run_in_progress", "too_many_runs", "failed"] | None = "failed"
        try:
            refused = await self._store.take_run_slot(
                scope, session_id, run_id, self._limit, now_ms()
            )
        except StoreUnavailable:
            raise  # the store stayed away past the tolerance: the caller refuses the run
        except StorageError as exc:
            log.warning("run slots unavailable: %s", exc)
            refused = None
        finally:
            if refused is not None:
                self.release(scope.tenant_id)
        if refused == "run_in_progress":
            raise run_in_progress()
        if refused is not None:
            raise _too_many_runs(self._limit)

    async def free_slot(self, session_id: str, run_id: str) -> None:
        """Give back the ended run's slots in the shared store, and drop its controls."""
        await self._store.drop_controls(session_id, run_id)
        await self._store.release_run_slot(session_id, run_id)
