"""The /ws endpoint: authenticate, attach to a session, replay, then read and write.

Reading and writing run in separate tasks, so a stop message is read at once even while the
socket is busy streaming. Nothing a client sends closes the connection except a frame over
the size limit (1009) and a flood of frames past the per-connection rate (`rate_limited`,
then 1008); bad frames get an `error` frame and change nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from agent.errors import StorageError
from agent.rate import TokenBucket
from agent.validation import quoted
from server.auth import SUBPROTOCOL
from server.connection import FRAMES_PER_TURN, OVERFLOW_CLOSE_CODE, Connection
from server.live import LiveSession
from server.protocol import (
    MAX_WHOLE_NUMBER,
    AgentControlFrame,
    ChatFrame,
    ProtocolError,
    SelectVersionFrame,
    ToolDecisionFrame,
    check_echo_fits,
    error_frame,
    parse_client_frame,
    whole_number,
)
from server.services import Services
from server.storage.base import Scope

__all__ = ["websocket_endpoint"]

log = logging.getLogger(__name__)

CLOSE_SESSION_NOT_FOUND = 4404
CLOSE_TOO_BIG = 1009
CLOSE_RATE_LIMITED = 1008  # policy violation
REPLAY_PAGE = 500  # events read from the store per replay page
REPLAY_BYTES = 4 << 20  # and about this many bytes of them (500 large tool results: ~128 MB)
ACTIVE_PATH_WAIT_S = 2.0  # the most a `session` frame waits for the store's active path


def _dumps(frame: dict[str, Any]) -> str:
    return orjson.dumps(frame).decode()


async def websocket_endpoint(websocket: WebSocket) -> None:
    services: Services = websocket.app.state.services
    auth = services.auth
    origin = websocket.headers.get("origin")
    if not auth.origin_allowed(origin):
        log.info("WebSocket refused: its Origin %.200r is not in server.allowed_origins", origin)
        await _refuse(websocket, "origin_not_allowed", "This page's origin may not connect.")
        return
    offered = websocket.scope.get("subprotocols") or []
    scope = auth.identify(websocket.headers, websocket.query_params.get("token"), offered)
    if scope is None:
        log.info("WebSocket refused: no valid token")  # never the token itself
        await _refuse(websocket, "unauthorized", "A valid token is needed to connect.")
        return
    tenant = scope.tenant_id
    if services.sockets[tenant] >= services.settings.sockets_per_tenant:
        message = "This tenant has too many connections open; close some, then try again."
        body = {"code": "too_many_connections", "message": message}
        await websocket.send_denial_response(JSONResponse(body, status_code=503))
        return
    services.sockets[tenant] += 1
    try:
        await _accepted(services, websocket, scope, offered)
    finally:
        services.sockets[tenant] -= 1
        if not services.sockets[tenant]:
            del services.sockets[tenant]


async def _accepted(
    services: Services, websocket: WebSocket, scope: Scope, offered: list[str]
) -> None:
    # A browser that offered subprotocols (the token one) needs one selected, never the token.
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    session_id = websocket.query_params.get("session_id") or None
    after_seq, query_error = _after_seq(websocket.query_params.get("after_seq"))
    try:
        live, resumed = await services.hub.open(scope, session_id)
    except ProtocolError as exc:
        await websocket.send_text(_dumps(error_frame(exc.code, exc.message)))
        await websocket.close(code=CLOSE_SESSION_NOT_FOUND)
        return
    except StorageError:
        await websocket.send_text(
            _dumps(error_frame("storage_error", "The conversation store is unavailable."))
        )
        await websocket.close(code=1011)
        return
    server = services.settings.server
    conn = Connection(websocket, server.outbound_queue_size, server.outbound_queue_bytes)
    try:
        replay_from = after_seq if resumed else None
        await _attach(services, websocket, live, conn, resumed, replay_from, query_error)
        await _serve(services, websocket, live, conn)
    finally:
        live.unsubscribe(conn)
        services.hub.release(live)


async def _active_path(services: Services, live: LiveSession) -> list[str] | None:
    """The session's active path for its `session` frame, read after subscribing (a switch
    meanwhile is in the held frames); None when the store does not answer at once: a client
    is never kept waiting for it through a store outage (it shows every version until the
    next switch or reconnect)."""
    outage = services.hub.stored.outage()
    if outage is not None and outage.down:
        return None
    try:
        async with asyncio.timeout(ACTIVE_PATH_WAIT_S):
            return await services.hub.active_path(live)
    except (StorageError, TimeoutError):
        return None


def _after_seq(raw: str | None) -> tuple[int | None, str | None]:
    if raw is None or raw == "":
        return None, None
    value = whole_number(raw)
    if value is not None:
        return value, None
    return None, (
        f"after_seq: expected a whole number from 0 to {MAX_WHOLE_NUMBER} in ASCII digits "
        f"(got {quoted(raw)}); nothing was replayed."
    )


async def _attach(
    services: Services,
    websocket: WebSocket,
    live: LiveSession,
    conn: Connection,
    resumed: bool,
    after_seq: int | None,
    query_error: str | None,
) -> None:
    """Send the session frame, then the replay, then live frames: no gap, no duplicate.

    Live frames are held back from the moment of subscription; the replay is sent directly,
    page by page at the client's pace (the writer task has not started yet); then held frames
    the replay already contained are dropped.
    """
    conn.hold()
    live.subscribe(conn)
    snapshot = live.snapshot()  # taken with the subscription: held frames come after it
    first = {
        "type": "session",
        "session_id": live.session_id,
        "resumed": resumed,
        **services.hub.session_defaults,
    }
    first["active_path"] = await _active_path(services, live)
    await websocket.send_text(_dumps({**first, **snapshot}))
    if query_error is not None:
        await websocket.send_text(_dumps(error_frame("invalid_message", query_error)))
    # A number past the end (a stale or foreign one) replays nothing: live events follow
    # from the session's own last_seq, none of them skipped.
    last_seq = snapshot["last_seq"]
    if after_seq is not None and after_seq > last_seq and services.hub.stored.shared:
        # A session this process follows knows the store's count one poll late, and the
        # client may have seen more on the process that runs it: the store says where the
        # end is, so nothing the client has is sent again.
        try:
            record = await services.hub.stored.get(live.scope, live.session_id)
        except StorageError:
            record = None  # the replay below meets the failure and says so
        last_seq = max(last_seq, record.last_seq if record is not None else 0)
    replayed_up_to = last_seq if after_seq is None else min(after_seq, last_seq)
    if after_seq is not None:
        pages = services.hub.stored.events(
            live.scope,
            live.session_id,
            replayed_up_to,
            events=REPLAY_PAGE,
            max_bytes=REPLAY_BYTES,
        )
        try:
            async for page, last in pages:
                for sent, raw in enumerate(page, 1):
                    await websocket.send_text(raw.decode())
                    if sent % FRAMES_PER_TURN == 0:
                        await asyncio.sleep(0)  # let the others run between two runs of frames
                replayed_up_to = last
        except StorageError:
            error = error_frame("storage_error", "Stored events could not be read.")
            await websocket.send_text(_dumps(error))
    conn.release(replayed_up_to)


async def _serve(
    services: Services, websocket: WebSocket, live: LiveSession, conn: Connection
) -> None:
    writer = asyncio.create_task(conn.write_forever())
    reader = asyncio.create_task(_read(services, websocket, live, conn))
    overflow = asyncio.create_task(conn.overflowed.wait())
    try:
        done, _ = await asyncio.wait({writer, reader, overflow}, return_when="FIRST_COMPLETED")
        if overflow in done:
            await _close(websocket, OVERFLOW_CLOSE_CODE)
        elif reader in done and reader.result() == CLOSE_TOO_BIG:
            await _close(websocket, CLOSE_TOO_BIG)
        elif reader in done and reader.result() == CLOSE_RATE_LIMITED:
            writer.cancel()  # the error goes out now, ahead of anything still queued
            await asyncio.gather(writer, return_exceptions=True)
            await _send_then_close(websocket, _RATE_LIMITED, CLOSE_RATE_LIMITED)
    finally:
        for task in (writer, reader, overflow):
            task.cancel()
        await asyncio.gather(writer, reader, overflow, return_exceptions=True)


async def _read(
    services: Services, websocket: WebSocket, live: LiveSession, conn: Connection
) -> int | None:
    """Handle inbound frames until the client leaves; return a close code if we must close."""
    limit = services.settings.server.max_message_bytes
    server = services.settings.server
    clock = asyncio.get_running_loop().time
    rate = TokenBucket(server.max_messages_per_s, server.message_burst, clock)
    while True:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return None
        if message["type"] == "websocket.disconnect":
            return None
        if rate.take():  # over the rate: no token left
            return CLOSE_RATE_LIMITED
        text = message.get("text")
        if text is None:
            data = message.get("bytes") or b""
            if len(data) > limit:
                return CLOSE_TOO_BIG
            conn.send(
                _dumps(
                    error_frame(
                        "invalid_json", "Binary frames are not supported: send JSON as text."
                    )
                )
            )
            continue
        if len(text) * 4 > limit and len(text.encode()) > limit:
            return CLOSE_TOO_BIG
        try:
            await _dispatch(services, live, conn, text)
        except ProtocolError as exc:
            conn.send(_dumps(exc.frame()))
        except StorageError:
            conn.send(_dumps(error_frame("storage_error", "The change could not be saved.")))


async def _dispatch(services: Services, live: LiveSession, conn: Connection, text: str) -> None:
    frame = parse_client_frame(text)
    try:
        if isinstance(frame, ChatFrame):
            check_echo_fits(frame, live.session_id, services.settings.server.max_message_bytes)
            await services.hub.start_run(live, frame)
        elif isinstance(frame, AgentControlFrame):
            if frame.action == "stop":
                await services.hub.stop(live)
                conn.overtake_deltas()
            else:
                await services.hub.rerun(live, frame)
        elif isinstance(frame, ToolDecisionFrame):
            await services.hub.decide(live, frame.tool_call_id, frame.approve, frame.reason)
        elif isinstance(frame, SelectVersionFrame):
            await services.hub.select_version(live, frame.run_id, frame.id)
        else:
            await services.hub.answer(live, frame.content, frame.tool_call_id)
    except ProtocolError as exc:
        exc.frame_id = frame.id
        raise


_RATE_LIMITED = _dumps(
    error_frame(
        "rate_limited",
        "Too many messages on this connection; it is closed (code 1008). "
        "Reconnect with session_id and after_seq to continue.",
    )
)


async def _refuse(websocket: WebSocket, code: str, message: str) -> None:
    """Refuse the handshake with HTTP 403 and a body that says why: a bad token and a
    foreign origin look the same to a client otherwise (a browser's devtools show it)."""
    body = {"code": code, "message": message}
    await websocket.send_denial_response(JSONResponse(body, status_code=403))


async def _send_then_close(websocket: WebSocket, text: str, code: int) -> None:
    try:
        await websocket.send_text(text)
    except (RuntimeError, WebSocketDisconnect):
        log.debug("socket closed before the %s close could be explained", code)
        return
    await _close(websocket, code)


async def _close(websocket: WebSocket, code: int) -> None:
    try:
        await websocket.close(code=code)
    except RuntimeError:  # already closed by the peer
        log.debug("socket closed before close code %s was sent", code)
