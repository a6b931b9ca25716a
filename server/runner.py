"""AgentServer: uvicorn's Server, with a shutdown that lets runs end cleanly first.

uvicorn's own shutdown closes every WebSocket with 1012 at once. Ours stops accepting, stops
each run with `agent_stopped` ("shutdown") + `response_complete` while its watchers are still
connected, closes their sockets with 1001, and only then hands over to uvicorn.
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from server.guard import RateLimitedExceptionHandler
from server.services import Services

__all__ = ["AgentServer"]


class AgentServer(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # A fault that repeats per connection attempt is logged once per interval, not each time.
        asyncio.get_running_loop().set_exception_handler(RateLimitedExceptionHandler())
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        app = self.config.loaded_app if self.config.loaded else self.config.app
        services: Services | None = _services(app)
        if services is not None:
            await services.hub.shutdown(services.settings.server.shutdown_timeout_s)
        await super().shutdown(sockets)


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
