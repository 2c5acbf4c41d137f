"""The plain produce request answered below FastAPI's routing, the same answer in a fifth of the framework's time.

A request through FastAPI pays about 0.8 ms of CPU on these machines before and after its endpoint runs (the
middleware chain, matching the path against every route, resolving the dependencies, the response's
validation), as much as appending 256 KiB. A produce request that the route would take as is (POST
/v1/topics/{topic}/messages, a JSON body that produce_json reads without pydantic, a caller allowed to
produce) is answered here: the body read, the messages appended through the same `Backend.produce`, the same
answer written. Anything else goes on to the app untouched: a request for another route, a caller the route
would refuse, a body it has to validate. For those the lane replays what it already received, so the route
reads the same body (or meets the same error while reading it) and answers as it always does.

Sits inside BodyLimit (a body over the limit is refused, or counted as it arrives, before the lane reads it)
and RequestMetrics (the request is counted under the route's path, which the lane sets in the scope as the
router would). An error of the produce itself is answered by the app's own exception handlers
(api/http/errors.py), found for the exception's class the way Starlette finds them.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import HTTPException, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.backend import Backend
from api.http.auth import principal
from api.http.models import TOPIC_PATTERN
from api.http.produce_json import produce_messages, produced_answer
from api.http.routes import PRODUCE_PATH, is_json, off_loop, router

_PRODUCE = re.compile("^" + re.escape(PRODUCE_PATH).replace(r"\{topic\}", "(" + TOPIC_PATTERN.strip("^$") + ")")
                      + "$")
#: the produce route: its path labels the request's metrics, as when the router matched it
_ROUTE = next(r for r in router.routes
              if isinstance(r, Route) and r.path == PRODUCE_PATH and "POST" in (r.methods or ()))


class ProduceLane:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        topic = self._topic(scope)
        if topic is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if not self._allowed(request):
            await self.app(scope, receive, send)  # the route answers 401 or 403
            return
        received: list[Message] = []
        try:
            raw = await self._body(receive, received)
        except Exception as exc:  # a body over the limit, a client gone: the route meets it while reading
            await self.app(scope, _replay(received, receive, exc), send)
            return
        messages = produce_messages(raw) if raw is not None else None
        if messages is None:  # not a plain body: the route validates it and names the field at fault
            await self.app(scope, _replay(received, receive), send)
            return
        scope["route"] = _ROUTE
        backend: Backend = scope["app"].state.backend
        try:
            produced = await off_loop(backend.produce, topic, messages)
        except Exception as exc:
            response = await _handled(request, exc)
        else:
            response = Response(produced_answer(produced), media_type="application/json")
        await response(scope, receive, send)

    @staticmethod
    def _topic(scope: Scope) -> str | None:
        """The topic of a produce request with a JSON body, else None."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        m = _PRODUCE.match(path)
        if m is None:
            return None
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        return m.group(1) if is_json(content_type.decode("latin-1")) else None

    @staticmethod
    def _allowed(request: Request) -> bool:
        try:
            return principal(request).allows("produce")
        except HTTPException:
            return False

    @staticmethod
    async def _body(receive: Receive, received: list[Message]) -> bytes | None:
        """The whole body, each message kept in `received`; None when the client went away first."""
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                return None
            if not message.get("more_body", False):
                break
        if len(received) == 1:
            return received[0].get("body", b"")  # type: ignore[no-any-return]
        return b"".join(m.get("body", b"") for m in received)


def _replay(received: list[Message], receive: Receive, error: Exception | None = None) -> Receive:
    """A receive that gives back what the lane read, then the error it met reading (if any), then the rest."""
    pending = list(received)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        if error is not None:
            raise error
        return await receive()

    return replayed


async def _handled(request: Request, exc: Exception) -> Any:
    """The app's answer to `exc`: its handler for the nearest class of the exception, as the route's
    ExceptionMiddleware finds it. An exception only the `Exception` handler takes is raised on: the server-error
    middleware outside answers it with that handler and raises it to the server, as for the route."""
    handlers = request.app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            break
        if cls in handlers:
            return await handlers[cls](request, exc)
    raise exc
