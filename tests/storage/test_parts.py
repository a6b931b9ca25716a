"""The storage contract's three parts (server/storage/base.py): each method of the contract
belongs to exactly one of them, and both backends implement every part."""

from __future__ import annotations

import inspect

import pytest

from server.storage.base import EventLog, RunCoordination, SessionStore, Store
from server.storage.mongo import MongoStore
from server.storage.sqlite import SQLiteStore

PARTS = (SessionStore, EventLog, RunCoordination)


def members(protocol: type) -> set[str]:
    own = {name for name in vars(protocol) if not name.startswith("_")}
    return own | set(getattr(protocol, "__annotations__", {}))


def test_the_parts_share_nothing_and_store_adds_only_open_and_close() -> None:
    seen: set[str] = set()
    for part in PARTS:
        names = members(part)
        assert names, part
        assert not names & seen, f"{part.__name__} repeats {names & seen}"
        seen |= names
    assert members(Store) == {"open", "close"}
    assert set(PARTS) <= set(Store.__mro__)


@pytest.mark.parametrize("backend", [SQLiteStore, MongoStore])
def test_each_backend_implements_every_part(backend: type) -> None:
    """The methods; `shared`, an attribute, is checked by mypy where a backend becomes a
    `Store` (server/app.py)."""
    for part in PARTS:
        for name, method in vars(part).items():
            if inspect.isfunction(method) and not name.startswith("_"):
                assert callable(getattr(backend, name, None)), f"{backend.__name__}.{name}"
