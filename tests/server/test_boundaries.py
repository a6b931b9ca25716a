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
    """The attributes of the owned classes: the fields they annotate and every
    `self.<name>` they assign."""
    names: set[str] = set()
    for cls in ast.parse(source).body:
        if not (isinstance(cls, ast.ClassDef) and cls.name in OWNED):
            continue
        for node in ast.walk(cls):
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
    assert {"status", "run", "pending_input", "subscribers", "task", "applied"} <= names
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
