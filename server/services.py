"""Services: what the app wires together once, shared by the endpoints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agent.tools.catalog import ToolCatalog
from server.auth import Authenticator
from server.sessions import SessionHub
from server.settings import Settings
from server.storage.base import Store

__all__ = ["Services"]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    store: Store  # the app opens and closes it; endpoints read it through `hub.stored`
    hub: SessionHub
    auth: Authenticator
    tools: ToolCatalog | None = None
    sockets: Counter[str] = field(default_factory=Counter)  # open WebSockets, by tenant
