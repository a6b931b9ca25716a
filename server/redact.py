"""Credentials never reach a log line: tokens in query strings and headers are masked.

uvicorn's access log prints request targets (`/ws?token=…`), and a library may log a header;
the filter rewrites each record's final text before any handler formats it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

__all__ = ["RedactingFilter", "install_log_redaction", "redact"]

_PATTERNS = (
    # ?token=…, &access_token=…, ticket=… in URLs and query strings (also percent-encoded '=')
    re.compile(r"(?i)((?:[?&;]|\b)(?:access_token|token|ticket)(?:=|%3D))[^&\s\"'#]*"),
    re.compile(r"(?i)(\bbearer\s+)[^\s\"',]+"),
    re.compile(r"(?i)(agent-server\.bearer\.)[^\s\"',]+"),
)
MASK = "[redacted]"


def redact(text: str) -> str:
    """`text` with every credential replaced by [redacted]."""
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


class RedactingFilter(logging.Filter):
    """Mask credentials in the record's message and its arguments.

    The arguments keep their shape: uvicorn's access formatter unpacks them (address, method,
    path, version, status), so a record collapsed to one string would fail to format. Only
    a credential that appears once the arguments are applied (an object's `str`) collapses
    the record to its masked text.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is left for logging to report
            return True
        if redact(message) == message:
            return True
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(arg) for arg in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _redacted(value) for key, value in record.args.items()}
        cleaned = record.getMessage()
        if redact(cleaned) != cleaned:
            record.msg, record.args = redact(cleaned), ()
        return True


def _redacted(value: object) -> object:
    return redact(value) if isinstance(value, str) else value


_LOGGERS = ("", "uvicorn", "uvicorn.access", "uvicorn.error", "websockets")


def install_log_redaction() -> None:
    """Attach the filter to uvicorn's loggers and to every handler they and root use.

    Call after logging is configured (uvicorn.Config configures it); calling again is harmless.
    """
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        targets: list[logging.Filterer] = [logger, *logger.handlers]
        for target in targets:
            if not any(isinstance(f, RedactingFilter) for f in target.filters):
                target.addFilter(RedactingFilter())
