"""`select_version`: show another version of a turn, and tell every watcher.

The switch is stored first (the run tree's `shown_at`: what the model reads next, and what a
new connection's `session` frame says), then as an `active_path` event, so that every tab, a
replay and another process's watchers follow it like any event (docs/wire-protocol.md,
"Versions of a turn").
"""

from __future__ import annotations

from server.events import Event, PathShown
from server.live import LiveSession, now_ms
from server.protocol import ProtocolError
from server.run_quota import run_in_progress
from server.storage.base import SessionStatus, SessionStore
from server.storage.runs import RunTree
from server.versions import load_tree

__all__ = ["select_version"]


async def select_version(
    store: SessionStore, live: LiveSession, run_id: str, frame_id: str | None = None
) -> None:
    """Show `run_id`'s version of its turn, and below it what was shown there last; raise
    ProtocolError `run_in_progress` while a run works, `unknown_run` for a run the session
    does not have."""
    if live.run is not None or live.status != SessionStatus.IDLE:
        raise run_in_progress()
    tree = await load_tree(store, live.scope, live.session_id)
    if run_id not in tree.nodes or not isinstance(store, RunTree):
        raise ProtocolError(
            "unknown_run", f"run_id: this conversation has no run {run_id!r} with versions."
        )
    leaf = tree.leaf_under(run_id)
    now = now_ms()
    if not await store.show_run(live.scope, live.session_id, leaf, now):
        raise ProtocolError("unknown_run", f"run_id: run {run_id!r} is gone.")
    shown = PathShown(run_id, tuple(tree.path(leaf)), frame_id)
    await live.publish([Event(shown, live.session_id, None, now)])
