"""bench's NullStore (the server without persistence, for `make bench`) is a whole store. A
fallback had answered None for any method it lacked; the run tree's `run_nodes` was one, and
every turn after a session's first then failed with `internal_error` (44,452 error frames in
the no-store throughput run), so the benchmark measured errors."""

from __future__ import annotations

import inspect

from bench.memstore import NullStore
from server.storage.base import Scope, Store
from server.storage.runs import RunTree
from server.versions import load_tree

SCOPE = Scope("t", "u")


def test_the_null_store_has_every_method_of_the_store_and_the_run_tree() -> None:
    wanted = {
        name
        for protocol in (Store, RunTree)
        for name, _ in inspect.getmembers(protocol, inspect.isfunction)
        if name[0] != "_"
    }
    assert {"run_nodes", "append_events", "take_run_slot"} <= wanted
    missing = {n for n in wanted if not any(n in vars(c) for c in NullStore.__mro__[:-1])}
    assert missing == set()


async def test_the_null_store_keeps_the_run_tree_of_a_session() -> None:
    store = NullStore()
    await store.create_session(SCOPE, "s1", 1)
    await store.add_run(SCOPE, "s1", "r1", None, 1)
    await store.add_run(SCOPE, "s1", "r2", "r1", 2)
    await store.add_run(SCOPE, "s1", "r2b", "r1", 3)  # r2 regenerated
    assert (await load_tree(store, SCOPE, "s1")).path() == ["r1", "r2b"]
    assert await store.show_run(SCOPE, "s1", "r2", 4)
    assert (await load_tree(store, SCOPE, "s1")).path() == ["r1", "r2"]
    assert await store.run_nodes(Scope("t", "someone else"), "s1") == []
