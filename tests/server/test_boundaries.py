"""A session's live state has one owner: only server/live.py changes a `LiveSession` or an
`ActiveRun`; every other module calls their named transitions (docs: DESIGN.md, "One owner
per piece of state")."""

from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "server"
OWNER = SERVER / "live.py"
OWNED = ("LiveSession", "ActiveRun")
# Calls that change a set, list or dict in place: `live.subscribers.add(...)` writes the
# session's state as surely as an assignment does.
MUTATORS = {
    "add",
    "append",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "setdefault",
    "update",
}


def owned_attributes(source: str) -> set[str]:
    """The attributes of the owned classes: the fields they annotate, every `self.<name>`
    they assign and their properties."""
    names: set[str] = set()
    for cls in ast.parse(source).body:
        if not (isinstance(cls, ast.ClassDef) and cls.name in OWNED):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list
            ):
                names.add(node.name)  # a view of the state: read, never assigned
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            for target in _targets(node):
                if isinstance(target, ast.Attribute) and _is_self(target.value):
                    names.add(target.attr)
    return names


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = node.targets
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        found = [node.target]
    else:
        return []
    flat: list[ast.expr] = []
    for target in found:
        flat.extend(target.elts if isinstance(target, ast.Tuple | ast.List) else [target])
    return flat


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _foreign(node: ast.expr, names: set[str]) -> bool:
    """`node` is `<something>.<owned name>`, the something not a class's own `self`."""
    return isinstance(node, ast.Attribute) and node.attr in names and not _is_self(node.value)


def writes(source: str, names: set[str]) -> list[str]:
    """Each place in `source` that assigns, or changes in place, an attribute named like one
    of the owned classes' on an object other than `self`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if isinstance(target, ast.Subscript):  # live.pending_input["x"] = ...
                target = target.value
            if _foreign(target, names):
                found.append((node.lineno, f"{ast.unparse(target)} = ..."))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
            and _foreign(node.func.value, names)
        ):
            found.append((node.lineno, f"{ast.unparse(node.func)}(...)"))
    return [f"line {line}: {text}" for line, text in sorted(found, key=lambda f: f[0])]


def test_only_live_py_changes_a_live_session_or_its_run():
    names = owned_attributes(OWNER.read_text(encoding="utf-8"))
    owned = {"status", "run", "pending_input", "pending_approval", "subscribers", "task", "applied"}
    assert owned <= names
    files = [path for path in sorted(SERVER.rglob("*.py")) if path != OWNER]
    assert files
    offences = {
        str(path.relative_to(SERVER.parent)): found
        for path in files
        if (found := writes(path.read_text(encoding="utf-8"), names))
    }
    assert not offences, f"call a transition of server/live.py instead: {offences}"


def test_the_check_sees_each_kind_of_write():
    names = {"status", "run", "pending_input", "subscribers", "applied"}
    source = """
live.status = "idle"
live.status, live.pending_input = "idle", None
live.run.applied.add("key")
self._live.subscribers.discard(conn)
live.pending_input["step"] = 2
live.run: object = None
self.status = "mine"  # a class's own attribute
self._store.status_of(live)  # a read
"""
    assert writes(source, names) == [
        "line 2: live.status = ...",
        "line 3: live.status = ...",
        "line 3: live.pending_input = ...",
        "line 4: live.run.applied.add(...)",
        "line 5: self._live.subscribers.discard(...)",
        "line 6: live.pending_input = ...",
        "line 7: live.run = ...",
    ]


# The endpoints reach the store only through the session layer (server/stored_sessions.py,
# `SessionHub.stored`): no transport holds a store or calls what reads one.
TRANSPORTS = ("http_api.py", "ws.py", "connection.py", "agui*.py")
STORE_ATTRIBUTES = {"store", "_store"}
STORE_NAMES = {
    "EventLog",
    "RunCoordination",
    "SessionSearch",
    "SessionStore",
    "Store",
    "events_in_pages",
    "history_on_path",
    "load_tree",
    "messages_on_path",
    "outage_of",
}


def store_uses(source: str) -> list[str]:
    """Each place in `source` that reaches a store: an attribute named like one, or an
    import or use of the store's protocols and of the functions that read a store."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in STORE_ATTRIBUTES:
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            found += [
                (node.lineno, f"import {a.name}") for a in node.names if a.name in STORE_NAMES
            ]
        elif isinstance(node, ast.Name) and node.id in STORE_NAMES:
            found.append((node.lineno, node.id))
    return [f"line {line}: {text}" for line, text in sorted(found, key=lambda f: f[0])]


def test_the_endpoints_reach_the_store_only_through_the_session_layer():
    files = sorted({path for pattern in TRANSPORTS for path in SERVER.glob(pattern)})
    assert SERVER / "http_api.py" in files and SERVER / "agui.py" in files
    offences = {
        path.name: found for path in files if (found := store_uses(path.read_text("utf-8")))
    }
    assert not offences, f"call SessionHub.stored (server/stored_sessions.py): {offences}"


def test_the_store_check_sees_each_kind_of_use():
    source = """
from server.storage.base import Scope, Store
await services.store.get_session(scope, sid)
self._store.shared
pages = events_in_pages(stored, scope, sid, 0)
await services.hub.stored.get(scope, sid)  # the session layer
"""
    assert store_uses(source) == [
        "line 2: import Store",
        "line 3: services.store",
        "line 4: self._store",
        "line 5: events_in_pages",
    ]


# Events stay typed until they leave the process: the only JSON the server parses is what
# comes in from outside, and what the store keeps (docs: DESIGN.md, "Typed until the edge").
# Stored events are decoded by server/storage/frames.py alone; the replay reads only the
# `seq` of a page's last event. Every parse is listed here with what it reads.
PARSERS = {
    "server/protocol.py": 1,  # a client's frame
    "server/agui_input.py": 1,  # an AG-UI request's body
    "server/http_api.py": 1,  # an HTTP request's body
    "server/settings.py": 1,  # a setting given as JSON
    "server/storage/frames.py": 1,  # a stored event: the one decoder
    "server/storage/base.py": 1,  # the replay: the `seq` of a page's last stored event
    "server/storage/sqlite.py": 4,  # its rows: messages, controls, a pending question
    "server/storage/sqlite_search.py": 1,  # a stored message, to index
    "server/storage/memory_sqlite.py": 1,  # a memory's keywords
}
JSON_MODULES = {"json", "orjson"}


def json_parses(source: str) -> list[int]:
    """The lines of `source` that call `loads` of json or orjson, however it was imported."""
    modules: set[str] = set()
    functions: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name in JSON_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in JSON_MODULES:
            functions |= {a.asname or a.name for a in node.names if a.name == "loads"}
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        by_module = (
            isinstance(func, ast.Attribute)
            and func.attr == "loads"
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
        )
        if by_module or (isinstance(func, ast.Name) and func.id in functions):
            lines.append(node.lineno)
    return sorted(lines)


def test_no_module_parses_an_event_it_built_or_stored():
    counts = {
        str(path.relative_to(SERVER.parent)): len(found)
        for path in sorted(SERVER.rglob("*.py"))
        if (found := json_parses(path.read_text(encoding="utf-8")))
    }
    assert counts == PARSERS, (
        "read the frame a subscriber is given, or decode stored events with "
        "server/storage/frames.py; only input from outside is parsed"
    )


def test_the_parse_check_sees_each_spelling():
    source = """
import orjson
import json as j
from orjson import loads
from json import loads as parse
orjson.loads(b"{}")
j.loads("{}")
loads(b"{}")
parse("{}")
orjson.dumps({})
other.loads("{}")
"""
    assert json_parses(source) == [6, 7, 8, 9]


# An event's frame is made in one place, where it leaves the process: `Event.draft` (server/
# events.py) with server/protocol.py's frame code. Everything else carries the typed `Event`.
FRAME_MAKERS = {"event_frame", "run_frame"}
FRAME_OWNERS = {SERVER / "events.py", SERVER / "protocol.py"}


def frame_making(source: str) -> list[int]:
    """The lines of `source` that call a frame maker, by name or as an attribute."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in FRAME_MAKERS:
                lines.append(node.lineno)
    return sorted(lines)


def test_only_the_edge_makes_an_event_frame():
    found = {
        str(path.relative_to(SERVER.parent)): lines
        for path in sorted(SERVER.rglob("*.py"))
        if path not in FRAME_OWNERS and (lines := frame_making(path.read_text(encoding="utf-8")))
    }
    assert found == {}, (
        "publish an Event (server/events.py); its frame is made once, where it is stored and sent"
    )


def test_the_frame_check_sees_each_spelling():
    source = """
from server.protocol import event_frame
from server import protocol
event_frame(e, "s", "r", 1)
protocol.run_frame("error", "s", "r", 1)
error_frame("llm_error", "m")
"""
    assert frame_making(source) == [4, 5]
