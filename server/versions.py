"""Versions of a turn: the run tree of a session and the path it shows.

An edited message or a regenerated answer is a new run beside the one it replaces (same
parent); the versions of a turn are the runs of one parent, in the order they started. The
shown path ends at the run shown last (`RunNode.shown_at`) and goes up its parents. Switching
a turn to another version shows, below it, what was shown there last. The model reads only the
shown path, and `/messages`, AG-UI's snapshot and the `session` frame follow it
(docs/wire-protocol.md, "Versions of a turn").

A store without a run tree (`RunTree`), and runs stored before it existed, have one version
of every turn: everything is shown, in order, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from agent.messages import Message
from server.storage.base import Scope, SessionStore
from server.storage.runs import RunNode, RunTree

__all__ = ["Tree", "history_on_path", "load_tree", "messages_on_path", "on_path"]

T = TypeVar("T")


@dataclass(frozen=True)
class Tree:
    """A session's runs as a tree; every query is pure."""

    nodes: dict[str, RunNode] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Iterable[RunNode]) -> Tree:
        return cls({n.run_id: n for n in sorted(nodes, key=lambda n: n.position)})

    def children(self, parent: str | None) -> list[str]:
        """The runs whose parent is `parent`, in the order they started."""
        return [n.run_id for n in self.nodes.values() if n.parent_run_id == parent]

    def versions(self, run_id: str) -> list[str]:
        """The versions of `run_id`'s turn, itself among them, in the order they started."""
        node = self.nodes.get(run_id)
        return [] if node is None else self.children(node.parent_run_id)

    def leaf(self) -> str | None:
        """The run at the end of the shown path (None: no run has a node)."""
        if not self.nodes:
            return None
        return max(self.nodes.values(), key=lambda n: (n.shown_at, n.position)).run_id

    def path(self, leaf: str | None = None) -> list[str]:
        """The shown path (or the path that ends at `leaf`), first run first."""
        out: list[str] = []
        run_id = leaf or self.leaf()
        while run_id is not None and run_id in self.nodes and run_id not in out:
            out.append(run_id)
            run_id = self.nodes[run_id].parent_run_id
        return out[::-1]

    def leaf_under(self, run_id: str) -> str:
        """The end of what was shown last below `run_id` (itself when nothing follows it)."""
        latest: dict[str, int] = {}
        for node in reversed(self.nodes.values()):  # children start after their parent
            below = max((latest[c] for c in self.children(node.run_id)), default=0)
            latest[node.run_id] = max(node.shown_at, below)
        while kids := self.children(run_id):
            run_id = max(kids, key=lambda c: (latest[c], self.nodes[c].position))
        return run_id


async def load_tree(store: SessionStore, scope: Scope, session_id: str) -> Tree:
    """The session's run tree; empty for a store that keeps none."""
    if not isinstance(store, RunTree):
        return Tree()
    return Tree.of(await store.run_nodes(scope, session_id))


def on_path(tree: Tree, items: Sequence[T], run_of: Callable[[T], Any]) -> list[T]:
    """`items` of the shown path only; `run_of(item)` names an item's run."""
    if len(tree.path()) == len(tree.nodes):
        return list(items)  # one version of every turn: nothing is hidden
    shown = set(tree.path())
    return [i for i in items if (r := run_of(i)) is None or r not in tree.nodes or r in shown]


async def history_on_path(store: SessionStore, scope: Scope, session_id: str) -> list[Message]:
    """The conversation the model reads: the session's messages on the shown path."""
    tree = await load_tree(store, scope, session_id)
    history = await store.load_history(scope, session_id)
    return on_path(tree, history, lambda m: m.run_id)


_WHOLE_SESSION = 1 << 40  # `read_messages` limit that reads every message


async def messages_on_path(
    store: SessionStore,
    scope: Scope,
    session_id: str,
    limit: int,
    since: int | None,
    max_bytes: int,
) -> tuple[list[dict[str, Any]], int, list[str]]:
    """`SessionStore.read_messages` along the shown path: (messages, their total, the path). A
    user's message of a turn with several versions carries `versions` (its turn's runs, in
    order) and `version_index` (its own place among them)."""
    tree = await load_tree(store, scope, session_id)
    path = tree.path()
    if len(path) == len(tree.nodes):  # nothing hidden: the store pages as before
        messages, total = await store.read_messages(
            scope, session_id, limit, since, max_bytes=max_bytes
        )
    else:  # pages of the shown messages: read the session whole, as a run's history is
        every, _ = await store.read_messages(scope, session_id, _WHOLE_SESSION, None)
        shown = on_path(tree, every, lambda body: body.get("run_id"))
        total = len(shown)
        if since is not None:
            messages = _within([m for m in shown if m["ts"] > since][:limit], max_bytes)
        else:
            messages = _within(shown[-limit:][::-1], max_bytes)[::-1]
    for body in messages:
        run_id = str(body.get("run_id"))
        versions = tree.versions(run_id) if body["role"] == "user" else []
        if len(versions) > 1 and body.get("phase") is None:
            body["versions"] = versions
            body["version_index"] = versions.index(run_id)
    return messages, total, path


def _within(messages: list[dict[str, Any]], max_bytes: int) -> list[dict[str, Any]]:
    """The first messages, up to the one that brings them past `max_bytes` (as the stores
    cut a page)."""
    out, size = [], 0
    for body in messages:
        out.append(body)
        size += len(orjson.dumps(body))
        if size > max_bytes:
            break
    return out
