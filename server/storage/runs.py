"""The run tree: which run follows which, and which versions of a turn are shown.

Each run records its parent, the run before it on the conversation's path when it started
(None for a session's first run). Runs with one parent are the versions of one turn: an
edited message or a regenerated answer is a new run beside the one it replaces. Each run also
has `shown_at`: when it was last the end of the shown path (its start, or the moment a client
switched to it). The shown path (docs/wire-protocol.md, "Versions of a turn") follows from
those alone (server/versions.py), so switching a version is one small write.

Runs stored before the tree existed have no node: they stay shown, in order, before the
first run that has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from server.storage.base import Scope

__all__ = ["RunNode", "RunTree"]


@dataclass(frozen=True, slots=True)
class RunNode:
    run_id: str
    parent_run_id: str | None
    position: int  # 0, 1, … in the order the session's runs started
    shown_at: int


@runtime_checkable
class RunTree(Protocol):
    async def add_run(
        self, scope: Scope, session_id: str, run_id: str, parent_run_id: str | None, now: int
    ) -> None:
        """Store a run's node, shown from `now` (a new run is the end of the shown path)."""
        ...

    async def show_run(self, scope: Scope, session_id: str, run_id: str, now: int) -> bool:
        """Make `run_id` the end of the shown path from `now`; False if the caller's session
        has no such run."""
        ...

    async def run_nodes(self, scope: Scope, session_id: str) -> list[RunNode]:
        """Every node of the caller's session, oldest first."""
        ...
