"""describe_errors: a pydantic ValidationError as the lines a person (or a model) can act on."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

__all__ = ["describe_errors", "quoted"]

# pydantic models say "extra_forbidden", pydantic dataclasses "unexpected_keyword_argument"
_UNKNOWN_KEY = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
MOST_LINES = 10  # a value with thousands of wrong items is described by its first ones
MOST_SHOWN = 80  # characters of a value quoted back


def quoted(value: object) -> str:
    """`value` for an error message, cut to `MOST_SHOWN` characters (a string as Python writes
    it, `'abc'`, anything else as JSON): a message never hands a long input back whole, as a
    1 MiB frame answered with 1 MiB more."""
    if not isinstance(value, str):
        return _json(value)
    if len(value) <= MOST_SHOWN:
        return repr(value)
    return f"{value[:MOST_SHOWN]!r}… ({len(value)} characters)"


def describe_errors(exc: ValidationError, *, root: str, show_input: bool = True) -> list[str]:
    """One line per error, `field.path: what is wrong (got <input>)`, for the first
    `MOST_LINES` errors and a last line that counts the others.

    `root` names the whole value when the error has no field; an unknown key reads "unknown
    key"; `show_input` adds what arrived (never for a missing field, nor a whole object), cut
    to `MOST_SHOWN` characters."""
    errors = exc.errors(include_url=False)
    lines = []
    for err in errors[:MOST_LINES]:
        where = ".".join(str(p) for p in err["loc"]) or root
        message = "unknown key" if err["type"] in _UNKNOWN_KEY else err["msg"]
        given = err.get("input")
        shown = ""
        if show_input and err["type"] != "missing" and not isinstance(given, dict):
            shown = f" (got {_json(given)})"
        lines.append(f"{where}: {message}{shown}")
    if len(errors) > MOST_LINES:
        lines.append(f"and {len(errors) - MOST_LINES} more errors")
    return lines


def _json(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    if len(text) <= MOST_SHOWN:
        return text
    return f"{text[:MOST_SHOWN]}… ({len(text)} characters)"
