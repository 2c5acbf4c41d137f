"""Bearer tokens with scopes (read, produce, admin; `admin` includes the others), checked through the shared
Authenticator (api/security/): tokens kept as SHA-256 hashes, compared in constant time. With no tokens
configured every request is allowed; `mqindex serve` refuses that on a non-loopback address unless
--allow-anonymous is given (api/security/protected.py)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, HTTPException, Request

from api.security.authenticator import Authenticator
from api.security.principals import ANONYMOUS, Principal


def authenticator(app: FastAPI) -> Authenticator:
    """The app's Authenticator, made from its settings on first use."""
    auth: Authenticator | None = getattr(app.state, "authenticator", None)
    if auth is None:
        settings = app.state.settings
        auth = app.state.authenticator = Authenticator(settings.tokens, getattr(settings, "users", {}))
    return auth


def principal(request: Request) -> Principal:
    """The caller of `request`, or a 401 when tokens are configured and none (or an unknown one) is given."""
    auth = authenticator(request.app)
    if not len(auth.tokens):
        return ANONYMOUS
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    found = auth.bearer(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
    if found is None:
        raise HTTPException(401, detail={"error": "missing or unknown bearer token", "field": "authorization"},
                            headers={"WWW-Authenticate": "Bearer"})
    return found


def require(scope: str) -> Callable[[Request], None]:
    def check(request: Request) -> None:
        if not principal(request).allows(scope):
            raise HTTPException(403, detail={"error": f"token lacks the {scope!r} scope", "field": "authorization"})

    return check
