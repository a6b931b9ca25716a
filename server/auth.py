"""Who is calling: bearer tokens map to a tenant and user; Origin is checked for browsers."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from server.settings import AuthSettings
from server.storage.base import Scope

__all__ = ["LOCAL_SCOPE", "Authenticator"]

LOCAL_SCOPE = Scope("local", "local")


class Authenticator:
    """Resolve a request's token to its Scope; without configured tokens everyone is local."""

    def __init__(self, settings: AuthSettings, allowed_origins: tuple[str, ...]) -> None:
        self._tokens = {t: Scope(i.tenant, i.user) for t, i in settings.tokens.items()}
        self._origins = frozenset(o.rstrip("/") for o in allowed_origins)

    @property
    def required(self) -> bool:
        return bool(self._tokens)

    def identify(self, headers: Mapping[str, str], query_token: str | None = None) -> Scope | None:
        """Return the caller's Scope, or None when a required token is missing or wrong."""
        if not self._tokens:
            return LOCAL_SCOPE
        token = query_token
        header = headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            token = header[7:].strip()
        if not token:
            return None
        for known, scope in self._tokens.items():  # constant time per candidate
            if hmac.compare_digest(known.encode(), token.encode()):
                return scope
        return None

    def origin_allowed(self, origin: str | None) -> bool:
        """Clients without an Origin (CLIs, servers) are allowed; browsers must be listed."""
        return origin is None or origin.rstrip("/") in self._origins
