"""Each default is written once: a second literal for the same setting drifts from the first
(`approval_timeout_s = 300` stood in four modules, the 30 s run lease in four)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# One setting, under the names its value goes by from the settings to the parts using it.
SETTINGS = {
    "tools.approval_timeout_s": {"approval_timeout_s"},
    "storage.run_lease_s": {"run_lease_s", "lease_ms", "RUN_LEASE_S"},
}


def _literal(node: ast.expr | None) -> bool:
    """A number written out, or a `Field(<number>, ...)`."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Field" and node.args:
        node = node.args[0]
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _defaults(path: Path) -> list[tuple[str, int]]:
    """(name, line) of each literal default or constant in `path`."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            pairs = list(
                zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=True)
            )
            pairs += [
                (a, d)
                for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                if d is not None
            ]
            found += [(arg.arg, arg.lineno) for arg, default in pairs if _literal(default)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if _literal(node.value):
                found.append((node.target.id, node.lineno))
        elif isinstance(node, ast.Assign) and _literal(node.value):
            found += [(t.id, node.lineno) for t in node.targets if isinstance(t, ast.Name)]
    return found


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_a_setting_s_default_is_written_once(setting: str) -> None:
    names = SETTINGS[setting]
    written = [
        f"{path.relative_to(REPO)}:{line} {name}"
        for package in ("agent", "server")
        for path in sorted((REPO / package).rglob("*.py"))
        for name, line in _defaults(path)
        if name in names
    ]
    assert len(written) == 1, f"{setting}'s default is written {len(written)} times: {written}"
