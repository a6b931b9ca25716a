"""AgentServer: uvicorn's Server, with a shutdown that lets runs end cleanly first.

uvicorn's own shutdown closes every WebSocket with 1012 at once. Ours stops accepting, stops
each run with `agent_stopped` ("shutdown") + `response_complete` while its watchers are still
connected, closes their sockets with 1001, and only then hands over to uvicorn.

It also owns the process's garbage-collector policy (`settle_heap`), since it owns the process.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket

import uvicorn

from server.guard import RateLimitedExceptionHandler
from server.services import Services

__all__ = ["AgentServer", "StartupFailureFilter"]


class AgentServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, owns_process: bool = False) -> None:
        """`owns_process`: this server is the process (`agent-server serve`), so it may tune
        process-wide settings; an app embedded in someone else's process leaves them alone."""
        super().__init__(config)
        self.owns_process = owns_process

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # A fault that repeats per connection attempt is logged once per interval, not each time.
        asyncio.get_running_loop().set_exception_handler(RateLimitedExceptionHandler())
        shortened = StartupFailureFilter()
        log = logging.getLogger("uvicorn.error")
        log.addFilter(shortened)
        try:
            await super().startup(sockets)
        finally:
            log.removeFilter(shortened)
        if self.owns_process:
            settle_heap()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        app = self.config.loaded_app if self.config.loaded else self.config.app
        services: Services | None = _services(app)
        if services is not None:
            loop = asyncio.get_running_loop()
            timeout = services.settings.server.shutdown_timeout_s
            deadline = loop.time() + timeout
            await services.hub.shutdown(timeout)
            # uvicorn then waits for connections that are still open (a client that never
            # reads): only for what is left of the one timeout, not for a second one.
            self.config.timeout_graceful_shutdown = max(0.1, deadline - loop.time())  # type: ignore[assignment]
        await super().shutdown(sockets)


class StartupFailureFilter(logging.Filter):
    """uvicorn logs a failed startup as the whole traceback of its cause. When the cause is
    one the operator fixes (the store cannot be opened or written, a setting is wrong), its
    message says what to do: that line alone is logged, as `cannot start: …`."""

    KNOWN = ("agent.errors.StorageError: ", "server.settings.ConfigError: ")

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith("Traceback"):
            last = text.rstrip().rsplit("\n", 1)[-1]
            for prefix in self.KNOWN:
                if last.startswith(prefix):
                    record.msg, record.args = "cannot start: %s", (last.removeprefix(prefix),)
        return True


# Young collections every 10,000 net allocations instead of 700. Under load most objects (a
# frame, a chunk, a future) die within a few event-loop turns; with the default, the ones alive
# at each of ~70 collections a second were promoted, and full collections over ~200k objects
# ran every ~1.5 s (100 ms each): 13% of the server's CPU at 200 streaming sessions.
GC_THRESHOLDS = (10_000, 10, 10)


def settle_heap() -> None:
    """Once the app has started: move what startup built (modules, schemas, settings) out of
    the collector's sight, and collect young objects less often (docs/benchmarks.md, "The
    garbage collector under load"). Everything made after this is collected as usual."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _services(app: object) -> Services | None:
    """Find the Services of our Starlette app behind uvicorn's middleware wrappers."""
    for _ in range(10):
        state = getattr(app, "state", None)
        services = getattr(state, "services", None) if state is not None else None
        if isinstance(services, Services):
            return services
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None
