"""Services: what the app wires together once, shared by the endpoints."""

from __future__ import annotations

from dataclasses import dataclass

from agent.tools.catalog import ToolCatalog
from server.auth import Authenticator
from server.sessions import SessionHub
from server.settings import Settings
from server.storage.base import Store

__all__ = ["Services"]


@dataclass(frozen=True, slots=True)
class Services:
    settings: Settings
    store: Store
    hub: SessionHub
    auth: Authenticator
    tools: ToolCatalog | None = None
