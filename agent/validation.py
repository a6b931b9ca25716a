"""describe_errors: a pydantic ValidationError as the lines a person (or a model) can act on."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

__all__ = ["describe_errors"]

# pydantic models say "extra_forbidden", pydantic dataclasses "unexpected_keyword_argument"
_UNKNOWN_KEY = frozenset({"extra_forbidden", "unexpected_keyword_argument"})


def describe_errors(exc: ValidationError, *, root: str, show_input: bool = True) -> list[str]:
    """One line per error, `field.path: what is wrong (got <input>)`.

    `root` names the whole value when the error has no field; an unknown key reads "unknown
    key"; `show_input` adds what arrived (never for a missing field, nor a whole object)."""
    lines = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or root
        message = "unknown key" if err["type"] in _UNKNOWN_KEY else err["msg"]
        given = err.get("input")
        shown = ""
        if show_input and err["type"] != "missing" and not isinstance(given, dict):
            shown = f" (got {_json(given)})"
        lines.append(f"{where}: {message}{shown}")
    return lines


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)
