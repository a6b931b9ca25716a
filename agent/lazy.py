"""Package re-exports that import their module on first use.

`agent` and `agent.tools` name their public API at the top, but a process that needs one
small module (the page-text worker imports `agent.tools.extract_worker` and nothing else of
the agent) should not pay for importing the loop, the SDKs and every tool on each start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module `__getattr__` and `__dir__` that import `name` from `where[name]` on first
    access (PEP 562) and keep it in the package's namespace."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
