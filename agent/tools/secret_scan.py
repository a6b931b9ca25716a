"""Refuse secrets before they reach long-term memory.

A memory is replayed into future prompts and stored unencrypted, so a password, key or card
number saved once would leak forever. The checks are deliberately simple and explainable:
well-known token formats, "password is ..." style statements, long random-looking strings,
and card numbers that pass the Luhn check. The caller reports the kind found, never the value.
"""

from __future__ import annotations

import math
import re
from collections import Counter

__all__ = ["find_secret"]

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, flags))
    for kind, pattern, flags in (
        ("a private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----", 0),
        ("an API key (sk-...)", r"\bsk-(?:proj-|ant-|live-)?[A-Za-z0-9_-]{16,}", 0),
        ("a Stripe key", r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}", 0),
        ("an AWS access key (AKIA...)", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", 0),
        ("a GitHub token (ghp_...)", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})", 0),
        ("a GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}", 0),
        ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", 0),
        ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}", 0),
        ("a JSON Web Token", r"\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}", 0),
        ("a bearer token", r"\bbearer\s+[A-Za-z0-9._~+/=-]{16,}", re.IGNORECASE),
        ("credentials in a URL", r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE),
        (
            "a password",
            r"\b(?:password|passwd|pwd|passcode|passphrase|pin|mot de passe|passwort|"
            r"contrase(?:ñ|n)a)\b\s*(?:is|was|=|:|->)\s*\S+",
            re.IGNORECASE,
        ),
        (
            "an API key or token",
            r"\b(?:api[_ -]?key|access[_ -]?key|secret[_ -]?key|client[_ -]?secret|"
            r"(?:auth|access|api|refresh)[_ -]?token|token|secret)\b\s*(?:is|=|:)\s*\S{8,}",
            re.IGNORECASE,
        ),
    )
)
_CANDIDATE = re.compile(r"[A-Za-z0-9+/=_-]{24,}")
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")


def find_secret(text: str) -> str | None:
    """Name the kind of secret the text seems to contain ("a password"), or None."""
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    for candidate in _CANDIDATE.findall(text):
        if _looks_random(candidate):
            return "a long random-looking string (a key or token)"
    for candidate in _CARD.findall(text):
        digits = re.sub(r"\D", "", candidate)
        if 13 <= len(digits) <= 19 and digits[0] in "3456" and _luhn(digits):
            return "a payment card number"
    return None


def _looks_random(word: str) -> bool:
    """Mixed case and digits, high entropy, and frequent class changes (unlike CamelCase)."""
    has = (any(c.islower() for c in word), any(c.isupper() for c in word))
    if not all(has) or not any(c.isdigit() for c in word):
        return False
    counts = Counter(word)
    entropy = -sum(n / len(word) * math.log2(n / len(word)) for n in counts.values())
    changes = sum(_kind(a) != _kind(b) for a, b in zip(word, word[1:], strict=False))
    return entropy >= 3.5 and changes >= 0.3 * len(word)


def _kind(char: str) -> int:
    return 0 if char.islower() else 1 if char.isupper() else 2 if char.isdigit() else 3


def _luhn(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char)
        if i % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0
