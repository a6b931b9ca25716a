"""agent-server's transport: Starlette app, WebSocket endpoint, HTTP API, storage, CLI."""

__all__: list[str] = []
