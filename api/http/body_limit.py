"""The request body size limit, answered in the {"error", "field"} shape (413).

Written by hand because FastAPI's own `max_body_size` answers a declared oversized body with plain text
before any exception handler runs. A declared Content-Length over the limit is refused before the body is
read; a streamed body is counted as it arrives and refused once it passes the limit.
"""

from __future__ import annotations

import json

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large(limit: int) -> dict[str, str]:
    """The refusal, naming the limit as HTTP's own (a request's body), not a topic's max.message.bytes."""
    return {"error": f"body is over HTTP's own limit of {limit} bytes ({limit >> 20} MiB) a request body",
            "field": "body"}


class BodyLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            body = json.dumps(too_large(self.limit)).encode()
            await send({"type": "http.response.start", "status": 413,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413, detail=too_large(self.limit))  # the route's error handler answers
            return message

        await self.app(scope, counted, send)
