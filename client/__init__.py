"""agent-server's clients: the terminal chat (`agent-server chat`). A client speaks only the
wire protocol (docs/wire-protocol.md): it imports nothing of `server` or `agent`."""

__all__: list[str] = []
