"""Reading a request's body up to a limit: stop reading at the limit, not after the body.

The HTTP API (server/http_api.py) and AG-UI (server/agui_input.py) read their bodies here and
each answer a `BodyError` in their own error shape.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

__all__ = ["BodyError", "read_body"]


class BodyError(Exception):
    """The body is over the limit (`too_large`), or the client left before it ended."""

    def __init__(self, message: str, *, too_large: bool) -> None:
        super().__init__(message)
        self.message, self.too_large = message, too_large


async def read_body(request: Request, limit: int) -> bytearray:
    """The request's body, at most `limit` bytes; BodyError otherwise."""
    body = bytearray()  # appended in place: a body sent in many small pieces is not re-copied
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise BodyError(f"The body is over {limit} bytes.", too_large=True)
    except ClientDisconnect:  # gone before its body ended: nobody reads the answer
        raise BodyError("The body ended early.", too_large=False) from None
    return body
