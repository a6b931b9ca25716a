"""The retry policy of an MCP server (tenacity, as every retry of the project): what keeps its
connection, and its tools/list_changed subscription, going.

A try that ends is tried again after `restart_backoff_s`, doubled after each try up to
`restart_backoff_max_s`; a try that ran for four times its wait (it worked a while) starts the
doubling over, so a server that ran for an hour is restarted at once, not after a minute. The
caller says when to stop (`again`): such a loop has no last try.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_result, wait_exponential

__all__ = ["restarts"]

LONG_RUN = 4  # a try that ran this many times its wait starts the doubling over


def restarts(
    first_s: float,
    most_s: float,
    *,
    again: Callable[[Any], bool],
    told: Callable[[Any, float], None],
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncRetrying:
    """Tries of something that should keep running. Each try returns a value; `again(value)`
    says whether to try again, `told(value, wait)` is called before the wait, and `pause`
    waits (one that a stop ends early returns early). An exception a try raises ends the
    loop with it: a try catches what it can ride through."""
    wait = wait_exponential(multiplier=first_s, max=most_s)
    began = clock()

    def before(state: RetryCallState) -> None:
        nonlocal began
        began = clock()

    def after(state: RetryCallState) -> None:
        if clock() - began > LONG_RUN * wait(state):
            state.attempt_number = 1  # the count the wait doubles by starts over

    def announce(state: RetryCallState) -> None:
        assert state.outcome is not None and state.next_action is not None
        told(state.outcome.result(), state.next_action.sleep)

    return AsyncRetrying(
        retry=retry_if_result(again),
        wait=wait,
        before=before,
        after=after,
        before_sleep=announce,
        sleep=pause,
    )
