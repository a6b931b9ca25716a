"""bench's NullStore (the server without persistence, for `make bench`) keeps what every turn
reads. Its fallback answers None for a method it lacks; the run tree's `run_nodes` was one,
and every second turn of a session then failed with `internal_error` (44,452 error frames in
the no-store throughput run), so the benchmark measured errors."""

from __future__ import annotations

import inspect

from bench.memstore import NullStore
from server.storage.base import Scope
from server.storage.runs import RunTree
from server.versions import load_tree

SCOPE = Scope("t", "u")


def test_the_null_store_has_every_method_of_the_run_tree_itself() -> None:
    wanted = {n for n, _ in inspect.getmembers(RunTree, inspect.isfunction) if n[0] != "_"}
    assert wanted and wanted <= set(vars(NullStore))


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
