"""Storage backends behind one contract (`base.Store`)."""

from server.storage.base import Scope, SessionRecord, Store

__all__ = ["Scope", "SessionRecord", "Store"]
