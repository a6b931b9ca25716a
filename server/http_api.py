"""The HTTP API of docs/wire-protocol.md: /healthz and /api/sessions/…, all scoped by the caller.

Errors are JSON: `{"code": "...", "message": "..."}` with status 400, 401, 404, 409, 501 or
503.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agent.errors import StorageError
from agent.validation import quoted
from server.events import usage_of
from server.local_model import BUNDLED_NAME
from server.metrics import PROMETHEUS_CONTENT_TYPE, prometheus_text, wants_prometheus
from server.protocol import MAX_WHOLE_NUMBER, whole_number
from server.request_body import BodyError, read_body
from server.services import Services
from server.storage.base import EVENTS_PAGE, Scope
from server.storage.search import MAX_QUERY_CHARS
from server.stored_sessions import StoredSessions

__all__ = ["health", "routes"]

MAX_LIMIT = 500
MESSAGES_MAX_BYTES = 16 << 20  # of one /messages body: fewer messages when they are large
MAX_TITLE = 200
MAX_BODY_BYTES = 8192
CLOSE_SESSION_NOT_FOUND = 4404


class _ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such path, a method the path does not take) in the API's
    error shape, with their headers (`Allow`)."""
    assert isinstance(exc, HTTPException)
    if exc.status_code in (204, 304):  # no body allowed
        return Response(status_code=exc.status_code, headers=exc.headers)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    response = _json({"code": code, "message": f"{exc.detail}."}, exc.status_code)
    response.headers.update(exc.headers or {})
    return response


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _scope(request: Request) -> Scope:
    scope = _services(request).auth.identify(request.headers)
    if scope is None:
        raise _ApiError(401, "unauthorized", "A valid 'Authorization: Bearer <token>' is required.")
    return scope


def _int_param(
    request: Request, name: str, default: int | None, low: int, high: int | None
) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    value = whole_number(raw)
    top = MAX_WHOLE_NUMBER if high is None else high
    if value is None or value < low or value > top:
        raise _ApiError(
            400,
            "invalid_query",
            f"{name}: expected a whole number from {low} to {top} in ASCII digits "
            f"(got {quoted(raw)}).",
        )
    return value


def _stored(request: Request) -> StoredSessions:
    return _services(request).hub.stored


async def _session_or_404(request: Request, scope: Scope) -> str:
    session_id = request.path_params["session_id"]
    if await _stored(request).get(scope, session_id) is None:
        raise _ApiError(404, "not_found", "There is no such session.")
    return str(session_id)


def _handler(fn: Any) -> Any:
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)  # type: ignore[no-any-return]
        except _ApiError as exc:
            return _json({"code": exc.code, "message": exc.message}, exc.status)
        except StorageError:
            message = "The conversation store is unavailable; try again shortly."
            return _json({"code": "storage_error", "message": message}, 503)

    return endpoint


async def healthz(request: Request) -> Response:
    """`{"status": "ok"}`; `"degraded"` while the store does not answer (`store` says since
    when) or an MCP server is not up. Why, and which MCP servers, go to an operator only (no
    token is needed here: the servers' names and errors, some of them one tenant's, and the
    store's address in its error, are not for anyone who asks)."""
    services = _services(request)
    return JSONResponse(health(services, operator=services.auth.is_operator(request.headers)))


def health(services: Services, *, operator: bool = False) -> dict[str, Any]:
    """The `/healthz` body (server.health_port serves it too, without the operator's detail)."""
    body: dict[str, Any] = {"status": "ok"}
    outage = services.hub.stored.outage()
    if outage is not None and outage.down:
        store = outage.health()
        if not operator:
            store.pop("error", None)
        body |= {"status": "degraded", "store": store}
    tools = services.tools
    if tools is not None and tools.servers:
        servers = tools.health()
        if not all(server["state"] == "up" for server in servers.values()):
            body["status"] = "degraded"
        if operator:
            body["mcp"] = servers
    return body


@_handler
async def list_tools(request: Request) -> Response:
    """The tools the caller's tenant can use now: name, description, parameters (JSON
    schema), source (`builtin`, `python:<module>`, `mcp:<server>`), needs_approval."""
    scope = _scope(request)
    tools = _services(request).tools
    return _json({"tools": tools.describe(scope.tenant_id) if tools is not None else []})


@_handler
async def whoami(request: Request) -> Response:
    """Whom the caller's token names: the page shows it, so that a sign-in link someone else
    made (their token in `?token=`) cannot pass for the reader's own account."""
    scope = _scope(request)
    settings = _services(request).settings
    signed_in = bool(settings.auth.tokens)
    model = {"name": settings.llm.model, "bundled": settings.llm.model == BUNDLED_NAME}
    return _json(
        {"tenant_id": scope.tenant_id, "user_id": scope.user_id, "auth": signed_in, "model": model}
    )


@_handler
async def list_sessions(request: Request) -> Response:
    scope = _scope(request)
    limit = _int_param(request, "limit", 50, 1, MAX_LIMIT)
    assert limit is not None
    query = request.query_params.get("q", "").strip()
    stored = _stored(request)
    if not query:
        records = await stored.newest(scope, limit)
        return _json({"sessions": [r.to_api() for r in records]})
    if len(query) > MAX_QUERY_CHARS:
        raise _ApiError(400, "invalid_query", f"q: expected at most {MAX_QUERY_CHARS} characters.")
    hits = await stored.search(scope, query, limit)
    if hits is None:
        raise _ApiError(501, "not_implemented", "This server's store cannot search messages.")
    return _json({"sessions": [hit.to_api() for hit in hits]})


@_handler
async def latest_session(request: Request) -> Response:
    scope = _scope(request)
    records = await _stored(request).newest(scope, 1)
    if not records:
        raise _ApiError(404, "not_found", "There are no sessions yet.")
    return _json(records[0].to_api())


async def _title_from_body(request: Request) -> str:
    try:
        raw = await read_body(request, MAX_BODY_BYTES)
    except BodyError as exc:
        raise _ApiError(400, "invalid_body", exc.message) from None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _ApiError(400, "invalid_body", "The body must be a JSON object.") from None
    title = body.get("title") if isinstance(body, dict) else None
    if not isinstance(title, str):
        raise _ApiError(400, "invalid_body", 'Expected {"title": "..."} with a text title.')
    title = " ".join(title.split())
    if not 1 <= len(title) <= MAX_TITLE:
        raise _ApiError(
            400, "invalid_body", f"title: expected 1 to {MAX_TITLE} characters (got {len(title)})."
        )
    return title


@_handler
async def session_item(request: Request) -> Response:
    """GET reads one session; PATCH renames it; DELETE removes it with its events and
    messages."""
    scope = _scope(request)
    session_id = str(request.path_params["session_id"])
    services = _services(request)
    record = await services.hub.stored.get(scope, session_id)
    if record is None:
        raise _ApiError(404, "not_found", "There is no such session.")
    if request.method in ("GET", "HEAD"):  # HEAD: Starlette adds it to every GET route
        return _json(record.to_api())
    if request.method == "PATCH":
        title = await _title_from_body(request)
        record = await services.hub.stored.rename(scope, session_id, title)
        if record is None:  # also: deleted in between
            raise _ApiError(404, "not_found", "There is no such session.")
        return _json(record.to_api())
    if request.method != "DELETE":  # the route takes no other: never delete by default
        raise _ApiError(405, "method_not_allowed", f"{request.method} is not allowed here.")
    outcome = await services.hub.delete(scope, session_id, CLOSE_SESSION_NOT_FOUND)
    if outcome == "run_in_progress":
        raise _ApiError(
            409, "run_in_progress", "This conversation is still running; stop it, then delete it."
        )
    if outcome == "not_found":
        raise _ApiError(404, "not_found", "There is no such session.")
    return Response(status_code=204)


@_handler
async def session_messages(request: Request) -> Response:
    scope = _scope(request)
    limit = _int_param(request, "limit", 50, 1, MAX_LIMIT)
    since = _int_param(request, "since", None, 0, None)
    session_id = await _session_or_404(request, scope)
    assert limit is not None
    messages, total, path = await _stored(request).messages(
        scope, session_id, limit, since, MESSAGES_MAX_BYTES
    )
    body = {"session_id": session_id, "messages": messages, "total": total}
    return _json({**body, "active_path": path})


@_handler
async def session_events(request: Request) -> Response:
    scope = _scope(request)
    after_seq = _int_param(request, "after_seq", 0, 0, None)
    limit = _int_param(request, "limit", None, 1, None)
    session_id = await _session_or_404(request, scope)
    assert after_seq is not None
    pages = _pages(_stored(request), scope, session_id, after_seq, limit)
    # a store that fails now is a 503, before any byte is sent
    first: list[bytes] = await anext(pages, [])
    second = await anext(pages, None)
    head = b'{"session_id":' + orjson.dumps(session_id) + b',"events":['
    if second is None:
        return Response(head + b",".join(first) + b"]}", media_type="application/json")
    return StreamingResponse(_body(head, first, second, pages), media_type="application/json")


async def _pages(
    stored: StoredSessions, scope: Scope, session_id: str, after_seq: int, limit: int | None
) -> AsyncIterator[list[bytes]]:
    """The events asked for, a page at a time (a long session is never held whole)."""
    left = limit
    size = min(limit or EVENTS_PAGE, EVENTS_PAGE)
    async for page, _ in stored.events(scope, session_id, after_seq, events=size):
        if left is not None:
            page = page[:left]
            left -= len(page)
        yield page
        if left == 0:
            return


async def _body(
    head: bytes, first: list[bytes], second: list[bytes], rest: AsyncIterator[list[bytes]]
) -> AsyncIterator[bytes]:
    """A body too long for one page, sent as it is read. A store that fails midway ends it
    early: the JSON is then incomplete, which a client sees as a failed read."""
    yield head + b",".join(first)
    yield b"," + b",".join(second)
    async for page in rest:
        if page:
            yield b"," + b",".join(page)
    yield b"]}"


@_handler
async def session_usage(request: Request) -> Response:
    """Token usage (and cost, when priced) summed over the session's runs."""
    scope = _scope(request)
    session_id = await _session_or_404(request, scope)
    totals: dict[str, float] = {}
    runs = 0
    async for page in _stored(request).decoded(scope, session_id, 0, marker=b'"usage"'):
        for event in page:
            usage = usage_of(event.event)
            if usage:
                runs += 1
                for key, value in usage.items():
                    totals[key] = totals.get(key, 0) + value
    if "cost" in totals:
        totals["cost"] = round(totals["cost"], 6)
    return _json({"session_id": session_id, "runs": runs, "usage": totals})


async def metrics(request: Request) -> Response:
    """Counters: process-wide for an operator token (or without auth), else the caller's
    tenant's only (`"scope"` says which). JSON, or Prometheus text when asked for it
    (`?format=prometheus`, or `Accept: text/plain`)."""
    services = _services(request)
    scope = services.auth.identify(request.headers)
    if scope is None:
        return _json({"code": "unauthorized", "message": "A valid token is required."}, 401)
    hub = services.hub
    tenant = None if services.auth.is_operator(request.headers) else scope.tenant_id
    head: dict[str, Any] = {"scope": "process"} if tenant is None else {"scope": "tenant"}
    if tenant is not None:
        head["tenant"] = tenant
    gauges = {
        "runs_active": hub.active_runs(tenant),
        "sessions_in_memory": hub.live_count(tenant),
    }
    stored = await _stored_bytes(services, tenant)
    if tenant is not None and stored is not None:
        gauges["stored_bytes"] = stored.get(tenant, 0)
    by_tenant = {"stored_bytes": stored} if tenant is None and stored is not None else {}
    counts = hub.metrics(tenant)
    if wants_prometheus(request.headers.get("accept", ""), request.query_params.get("format")):
        labels = {} if tenant is None else {"tenant": tenant}
        text = prometheus_text(counts, gauges, labels, by_tenant)
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)
    counters = {str(name): count for name, count in sorted(counts.items())}
    return _json(
        {**head, **gauges, **{f"{k}_by_tenant": v for k, v in by_tenant.items()}, **counters}
    )


async def _stored_bytes(services: Services, tenant: str | None) -> dict[str, int] | None:
    """The bytes each tenant keeps in the store (one tenant's, or None: every tenant's), or
    None when the store cannot say: the other figures are still served."""
    try:
        return await services.hub.stored.stored_bytes(tenant)
    except StorageError:
        return None


routes = [
    Route("/healthz", healthz),
    Route("/api/tools", list_tools),
    Route("/api/me", whoami),
    Route("/api/sessions", list_sessions),
    Route("/api/sessions/latest", latest_session),
    Route("/api/sessions/{session_id}", session_item, methods=["GET", "PATCH", "DELETE"]),
    Route("/api/sessions/{session_id}/messages", session_messages),
    Route("/api/sessions/{session_id}/events", session_events),
    Route("/api/sessions/{session_id}/usage", session_usage),
    Route("/metrics", metrics),
]
