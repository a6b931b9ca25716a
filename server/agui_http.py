"""AG-UI's HTTP edge, shared by its endpoints (server/agui.py, server/agui_connect.py): who
calls, from which Origin (CORS), the session a thread names, refusals as JSON, and the
server-sent events response. docs/ag-ui.md is the contract.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import orjson
from ag_ui.encoder import EventEncoder
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from agent.errors import StorageError
from server.agui_stream import Stream
from server.agui_threads import session_of_thread
from server.live import LiveSession
from server.protocol import ProtocolError
from server.services import Services
from server.storage.base import Scope

__all__ = [
    "Refused",
    "caller",
    "cors",
    "json_response",
    "open_thread",
    "preflight",
    "refusal",
    "session_id_of",
    "sse_response",
]

_THREAD_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
# Server-sent events through a proxy: nginx buffers responses unless told not to.
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_STATUS = {
    "invalid_message": 400,
    "session_not_found": 404,
    "run_in_progress": 409,
    "too_many_runs": 429,
    "storage_unavailable": 503,
    "storage_quota_exceeded": 507,
    "no_active_run": 409,
    "not_awaiting_input": 409,
    "not_awaiting_approval": 409,
    "unknown_tool_call": 409,
    "already_decided": 409,
}


class Refused(Exception):
    """A request refused with an HTTP `status` and a JSON `{code, message}` body."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def json_response(body: Any, status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def caller(request: Request, services: Services) -> Scope:
    """The caller's scope; Refused for an Origin not allowed or a missing token."""
    if not services.auth.origin_allowed(request.headers.get("origin")):
        raise Refused(403, "forbidden_origin", "This Origin is not allowed.")
    scope = services.auth.identify(request.headers, request.query_params.get("token"))
    if scope is None:
        raise Refused(401, "unauthorized", "A valid 'Authorization: Bearer <token>' is required.")
    return scope


async def session_id_of(services: Services, scope: Scope, thread_id: str) -> str:
    """The caller's session for the thread (server/agui_threads.py)."""
    if not _THREAD_ID.fullmatch(thread_id):
        raise Refused(400, "invalid_message", "threadId: 1-128 letters, digits, '_.:-'.")
    try:
        return await session_of_thread(services.hub.stored, scope, thread_id)
    except StorageError:
        raise Refused(503, "storage_error", "The store is unavailable.") from None


async def open_thread(
    services: Services, scope: Scope, thread_id: str, create: bool
) -> LiveSession:
    """The thread's session, held open (and stored: `create` makes it) until released."""
    session_id = await session_id_of(services, scope, thread_id)
    hub = services.hub
    try:
        live, _ = await hub.open(scope, session_id, create=create)
    except ProtocolError as exc:
        raise Refused(404, exc.code, exc.message) from None
    except StorageError:
        raise Refused(503, "storage_error", "The conversation store is unavailable.") from None
    try:
        await live.ensure_stored()
    except StorageError:
        hub.release(live)
        try:  # the id is another's (the insert failed) or the store is down
            await services.hub.stored.get(scope, session_id)
        except StorageError:
            raise Refused(503, "storage_error", "The store is unavailable.") from None
        raise Refused(404, "session_not_found", "There is no such session.") from None
    return live


def refusal(
    request: Request,
    services: Services,
    live: LiveSession | None,
    stream: Stream | None,
    exc: Exception,
    storage_failed: str,
) -> Response:
    """A request refused (or failed) before its stream began: let go of the session and
    answer with the error; `storage_failed` says what a store failure stopped."""
    if live is not None:
        if stream is not None:
            live.unsubscribe(stream)
        services.hub.release(live)
    if isinstance(exc, ProtocolError):
        exc = Refused(_STATUS.get(exc.code, 400), exc.code, exc.message)
    elif isinstance(exc, StorageError):
        exc = Refused(503, "storage_error", storage_failed)
    assert isinstance(exc, Refused)
    return cors(request, json_response({"code": exc.code, "message": exc.message}, exc.status))


def sse_response(request: Request, body: AsyncIterator[str]) -> Response:
    """`body` streamed as server-sent events, past proxies, readable by an allowed Origin."""
    response = StreamingResponse(body, media_type=EventEncoder().get_content_type())
    response.headers.update(_SSE_HEADERS)
    return cors(request, response)


def cors(request: Request, response: Response) -> Response:
    """Let an allowed browser Origin read the answer; a refused one (403) may not read even
    the refusal (its page learns nothing: not the error, not that the server is there)."""
    origin = request.headers.get("origin")
    services: Services = request.app.state.services
    if origin is not None and services.auth.origin_allowed(origin):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
    return response


async def preflight(request: Request) -> Response:
    """CORS preflight of a browser front end on another allowed origin."""
    services: Services = request.app.state.services
    if not services.auth.origin_allowed(request.headers.get("origin")):
        return Response(status_code=403)
    response = Response(status_code=204)
    response.headers.update(
        {
            "Access-Control-Allow-Methods": "POST",
            "Access-Control-Allow-Headers": "authorization, content-type, accept",
            "Access-Control-Max-Age": "600",
        }
    )
    return cors(request, response)
