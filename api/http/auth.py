"""Bearer tokens with scopes (read, produce, admin; `admin` includes the others), checked through the shared
Authenticator (api/security/): tokens kept as SHA-256 hashes, compared in constant time. With no tokens
configured every request is allowed; `mqindex serve` refuses that on a non-loopback address unless
--allow-anonymous is given (api/security/protected.py).

A route's scope is checked by its dependency (`require`), which FastAPI runs only after it has read and parsed
the request's body. So `AuthenticateFirst` refuses a request with a body (POST, PUT, PATCH) and no known token
before any of the body is read: an anonymous caller cannot make the server read and parse up to the body limit
(every such route needs a scope)."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi import FastAPI, HTTPException, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from api.security.authenticator import Authenticator
from api.security.principals import ANONYMOUS, Principal


def authenticator(app: FastAPI) -> Authenticator:
    """The app's Authenticator, made from its settings on first use."""
    auth: Authenticator | None = getattr(app.state, "authenticator", None)
    if auth is None:
        settings = app.state.settings
        auth = app.state.authenticator = Authenticator(settings.tokens, getattr(settings, "users", {}))
    return auth


UNAUTHENTICATED = {"error": "missing or unknown bearer token", "field": "authorization"}


def _bearer(auth: Authenticator, header: str) -> Principal | None:
    scheme, _, token = header.partition(" ")
    return auth.bearer(token.strip()) if scheme.lower() == "bearer" and token.strip() else None


def principal(request: Request) -> Principal:
    """The caller of `request`, or a 401 when tokens are configured and none (or an unknown one) is given."""
    auth = authenticator(request.app)
    if not len(auth.tokens):
        return ANONYMOUS
    found = _bearer(auth, request.headers.get("authorization", ""))
    if found is None:
        raise HTTPException(401, detail=UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"})
    return found


class AuthenticateFirst:
    """A request with a body and no known bearer token is answered 401 before its body is read (module doc)."""

    METHODS = {"POST", "PUT", "PATCH"}

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in self.METHODS:
            auth = authenticator(scope["app"])
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            if len(auth.tokens) and _bearer(auth, header) is None:
                body = json.dumps(UNAUTHENTICATED).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def require(scope: str) -> Callable[[Request], None]:
    def check(request: Request) -> None:
        if not principal(request).allows(scope):
            raise HTTPException(403, detail={"error": f"token lacks the {scope!r} scope", "field": "authorization"})

    return check
