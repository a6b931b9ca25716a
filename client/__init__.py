"""agent-server's clients: the terminal chat (`agent-server chat`). A client speaks only the
wire protocol (docs/wire-protocol.md): it imports nothing of `server` or `agent`."""

__all__ = ["DEFAULT_URL"]

DEFAULT_URL = "ws://127.0.0.1:8765/ws"  # `agent-server serve` with the shipped config
