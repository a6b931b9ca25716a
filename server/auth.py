"""Who is calling: bearer tokens map to a tenant and user; Origin is checked for browsers.

A token arrives in `Authorization: Bearer <t>`, in `?token=<t>` (kept for old clients), or,
for browsers that cannot set headers on a WebSocket and should not put secrets in URLs, as
the WebSocket subprotocol `agent-server.bearer.<base64url(t)>` offered next to the plain
`agent-server` subprotocol, which the server then selects (docs/wire-protocol.md).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable, Mapping

from server.settings import AuthSettings
from server.storage.base import Scope

__all__ = ["BEARER_SUBPROTOCOL", "LOCAL_SCOPE", "SUBPROTOCOL", "Authenticator"]

LOCAL_SCOPE = Scope("local", "local")
SUBPROTOCOL = "agent-server"
BEARER_SUBPROTOCOL = "agent-server.bearer."


def _subprotocol_token(subprotocols: Iterable[str]) -> str | None:
    for offered in subprotocols:
        if offered.startswith(BEARER_SUBPROTOCOL):
            encoded = offered[len(BEARER_SUBPROTOCOL) :]
            try:
                raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
                return raw.decode("utf-8")
            except (binascii.Error, ValueError):
                return None
    return None


class Authenticator:
    """Resolve a request's token to its Scope; without configured tokens everyone is local."""

    def __init__(self, settings: AuthSettings, allowed_origins: tuple[str, ...]) -> None:
        self._tokens = {t: Scope(i.tenant, i.user) for t, i in settings.tokens.items()}
        self._operators = frozenset(t for t, i in settings.tokens.items() if i.operator)
        self._origins = frozenset(o.rstrip("/") for o in allowed_origins)

    @property
    def required(self) -> bool:
        return bool(self._tokens)

    def identify(
        self,
        headers: Mapping[str, str],
        query_token: str | None = None,
        subprotocols: Iterable[str] = (),
    ) -> Scope | None:
        """Return the caller's Scope, or None when a required token is missing or wrong."""
        if not self._tokens:
            return LOCAL_SCOPE
        token = self._known(self._token(headers, query_token, subprotocols))
        return None if token is None else self._tokens[token]

    def is_operator(self, headers: Mapping[str, str]) -> bool:
        """Whether the request's bearer token is an operator's (process-wide /metrics).
        Without configured tokens the one local user is the operator."""
        if not self._tokens:
            return True
        return self._known(self._token(headers, None, ())) in self._operators

    @staticmethod
    def _token(
        headers: Mapping[str, str], query_token: str | None, subprotocols: Iterable[str]
    ) -> str | None:
        header = headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            return header[7:].strip()
        return _subprotocol_token(subprotocols) or query_token

    def _known(self, token: str | None) -> str | None:
        if not token:
            return None
        found = None
        for known in self._tokens:  # constant time per candidate
            if hmac.compare_digest(known.encode(), token.encode()):
                found = known
        return found

    def origin_allowed(self, origin: str | None) -> bool:
        """Clients without an Origin (CLIs, servers) are allowed; browsers must be listed."""
        return origin is None or origin.rstrip("/") in self._origins
