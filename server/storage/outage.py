"""Outage: ride through a store that stalls or fails over, and keep the store's state.

    StorageError
    └── StoreUnavailable   a failure that can pass: a timeout, no primary, a network error,
                           a SQLite file another process holds locked

A store runs each of its operations through `Outage.ride`: a `StoreUnavailable` is retried
with exponential backoff and jitter (tenacity, as every retry of the project) until the
operation has waited `storage.outage_tolerance_s`, or the outage has lasted that long; then it
is raised, and the run that needed the write ends with `storage_error`. Any other
`StorageError` (a full disk, a refused document) is raised at once.

The same object says how the store is, for /healthz: `ok`, or `unavailable` since when and
why. An outage is logged when it begins, when it passes the tolerance and when it ends: a
stalled database costs three lines, not one per retry (docs/reliability.md).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from agent.errors import StorageError
from server.settings import StorageSettings

__all__ = [
    "Outage",
    "StoreUnavailable",
    "check_before_retry",
    "checked_before_retry",
    "log_retry",
    "outage_of",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

_FIRST_WAIT_S = 0.05  # the first retry: a failover or a lock often passes within moments
_MAX_WAIT_S = 2.0  # never longer between tries: the run resumes soon after the store does
_RECENT_S = 10.0  # a failure this recent still says the store is down (see `exhausted`)
# An outage is told (logged, and shown by /healthz) once it has lasted this long: under load
# a write now and then passes its timeout and the next one goes through, which is no outage.
_NOTICE_S = 1.0
DEFAULT_TOLERANCE_S: float = StorageSettings.model_fields["outage_tolerance_s"].default


Check = Callable[[], Awaitable[None]]
# Awaited before each try but the first of the writes made under `checked_before_retry`.
_before_retry: ContextVar[Check | None] = ContextVar("before_retry", default=None)


@contextmanager
def checked_before_retry(check: Check) -> Iterator[None]:
    """Around a write that must not be tried again blindly: `check()` runs before each new
    try (and raises to stop them). A run's writes check its lease: a process paused past it
    (SIGSTOP, a frozen VM) must not retry, on resuming, a write of a run another process has
    closed meanwhile."""
    token = _before_retry.set(check)
    try:
        yield
    finally:
        _before_retry.reset(token)


class StoreUnavailable(StorageError):
    """The store did not answer, or could not take the write now, in a way that can pass."""


class Outage:
    """Retry what can pass for up to `tolerance_s`; know whether the store answers."""

    def __init__(
        self,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tolerance_s = tolerance_s
        self._clock = clock
        self._since: float | None = None  # when the outage began (None: the store answers)
        self._last_failure = 0.0
        self._last_answer = 0.0
        self._error = ""
        self._told = self._told_past = False

    @property
    def down(self) -> bool:
        """The store has failed, in a way that can pass, since at least `_NOTICE_S` ago (or
        the tolerance, if shorter), and not answered since."""
        notice = min(_NOTICE_S, self.tolerance_s)
        return self._since is not None and self._clock() - self._since >= notice

    @property
    def exhausted(self) -> bool:
        """The store has failed for longer than the tolerance, and lately: a run started now
        would only wait to fail. A failure long past says nothing (nothing may have asked
        since), so a new run then tries again."""
        now = self._clock()
        return self._past_tolerance(now) and now - self._last_failure < _RECENT_S

    def health(self) -> dict[str, Any]:
        """The store's state as /healthz shows it."""
        if self._since is None or not self.down:
            return {"state": "ok"}
        return {
            "state": "unavailable",
            "for_s": round(self._clock() - self._since, 1),
            "tolerance_s": self.tolerance_s,
            "error": self._error,
        }

    async def ride(self, action: Callable[[], Awaitable[T]]) -> T:
        """Await `action()`, again after each `StoreUnavailable` until the tolerance is spent;
        `action` must be safe to repeat (a write that timed out may have been stored)."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(StoreUnavailable),
            stop=self._spent,
            wait=self._wait,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    await check_before_retry()
                began = self._clock()
                try:
                    result = await action()
                except StoreUnavailable as exc:
                    self._failed(exc, began)
                    raise
        self._answered()
        return result

    def _spent(self, state: RetryCallState) -> bool:
        waited = state.seconds_since_start or 0.0
        return waited >= self.tolerance_s or self._past_tolerance(self._clock())

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff with full jitter, never past the end of the tolerance."""
        ceiling = min(_MAX_WAIT_S, _FIRST_WAIT_S * 2.0 ** (state.attempt_number - 1))
        left = self.tolerance_s - (state.seconds_since_start or 0.0)
        return max(0.0, min(ceiling * random.random(), left))

    def _past_tolerance(self, now: float) -> bool:
        return self._since is not None and now - self._since >= self.tolerance_s

    def _failed(self, exc: StoreUnavailable, began: float) -> None:
        """`exc` ended a try that began at `began`: the store has not answered since then
        (a timeout arrives a whole `mongodb_timeout_ms` after the store went quiet), unless
        another operation got an answer meanwhile."""
        now = self._clock()
        self._last_failure, self._error = now, str(exc)
        if self._since is None:
            self._since = max(began, self._last_answer)
        if not self._told and self.down:
            self._told = True
            log.warning(
                "the store is unavailable (%s): writes wait for it, up to "
                "storage.outage_tolerance_s (%g s)",
                exc,
                self.tolerance_s,
            )
        if self._past_tolerance(now) and not self._told_past:
            self._told_past = True
            log.error(
                "the store has been unavailable for more than %g s (%s): runs that need it "
                "end with storage_error, new ones are refused",
                self.tolerance_s,
                exc,
            )

    def _answered(self) -> None:
        self._last_answer = self._clock()
        if self._since is None:
            return
        if self._told:
            log.warning("the store answers again, after %.1f s", self._clock() - self._since)
        self._since, self._error, self._told, self._told_past = None, "", False, False


async def check_before_retry() -> None:
    """Run the check of the write under way (`checked_before_retry`), if any: before a retry,
    and before a write goes on after another writer was found in its session."""
    check = _before_retry.get()
    if check is None:
        return
    token = _before_retry.set(None)  # the check's own store calls are not checked again
    try:
        await check()
    finally:
        _before_retry.reset(token)


def outage_of(store: object) -> Outage | None:
    """The store's `Outage`, if it rides through outages (both shipped backends do)."""
    outage = getattr(store, "outage", None)
    return outage if isinstance(outage, Outage) else None


def log_retry(logger: logging.Logger, what: str, exc: StorageError) -> None:
    """Log a failure that the caller will retry: at debug when it is part of an outage (the
    store logs the outage itself, once), so a stalled database does not flood the log."""
    level = logging.DEBUG if isinstance(exc, StoreUnavailable) else logging.WARNING
    logger.log(level, "%s, will retry: %s", what, exc)
