"""The run tree's storage contract (server/storage/runs.py), on both backends; and the shown
path it gives (server/versions.py)."""

from __future__ import annotations

import asyncio

from server.storage.base import Scope, Store
from server.storage.runs import RunNode, RunTree
from server.versions import Tree

ALICE = Scope("acme", "alice")
BOB = Scope("acme", "bob")


async def test_runs_are_stored_in_order_scoped_and_deleted_with_their_session(
    store: Store,
) -> None:
    assert isinstance(store, RunTree)
    await store.create_session(ALICE, "s1", 1)
    await store.add_run(ALICE, "s1", "a", None, 10)
    await store.add_run(ALICE, "s1", "b", "a", 10)  # the same millisecond: still later
    await store.add_run(ALICE, "s1", "c", "a", 20)
    await store.add_run(ALICE, "s1", "c", "b", 30)  # stored once: the first write stands
    nodes = await store.run_nodes(ALICE, "s1")
    assert [(n.run_id, n.parent_run_id, n.position) for n in nodes] == [
        ("a", None, 0),
        ("b", "a", 1),
        ("c", "a", 2),
    ]
    assert nodes[1].shown_at > nodes[0].shown_at and Tree.of(nodes).path() == ["a", "c"]

    assert await store.show_run(ALICE, "s1", "b", 15)  # earlier than "c": shown all the same
    assert Tree.of(await store.run_nodes(ALICE, "s1")).path() == ["a", "b"]
    assert not await store.show_run(ALICE, "s1", "zz", 40)
    assert not await store.show_run(BOB, "s1", "c", 40)  # another user's session
    assert await store.run_nodes(BOB, "s1") == []

    assert await store.delete_session(ALICE, "s1", 50) == "deleted"
    assert await store.run_nodes(ALICE, "s1") == []
    await store.create_session(ALICE, "s1", 60)  # the same id again starts with no runs
    assert await store.run_nodes(ALICE, "s1") == []


def node(run_id: str, parent: str | None, position: int, shown_at: int) -> RunNode:
    return RunNode(run_id, parent, position, shown_at)


def test_a_switch_shows_below_a_turn_what_was_shown_there_last() -> None:
    # a ─ b ─ d          b and c are versions of the second turn; d follows b, e follows c
    #   └ c ─ e
    tree = Tree.of(
        [node("a", None, 0, 1), node("b", "a", 1, 2), node("d", "b", 3, 4)]
        + [node("c", "a", 2, 3), node("e", "c", 4, 5)]
    )
    assert tree.path() == ["a", "c", "e"]
    assert tree.versions("b") == ["b", "c"] and tree.versions("a") == ["a"]
    assert tree.leaf_under("b") == "d" and tree.leaf_under("c") == "e"
    assert tree.leaf_under("a") == "e"  # the most recently shown branch
    assert tree.path("d") == ["a", "b", "d"]
    assert Tree().path() == [] and Tree().leaf() is None


async def test_a_run_stored_twice_at_once_is_one_node(store: Store) -> None:
    """A write retried after a timeout may run beside the first try, still going: both
    succeed, and the run has one node."""
    assert isinstance(store, RunTree)
    await store.create_session(ALICE, "s1", 1)
    await asyncio.gather(*(store.add_run(ALICE, "s1", "a", None, 10) for _ in range(8)))
    assert [n.run_id for n in await store.run_nodes(ALICE, "s1")] == ["a"]
