"""Bearer tokens with scopes (read, produce, admin). With no tokens configured every request is allowed
(the embedded default binds 127.0.0.1 only). `admin` includes the other scopes."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import HTTPException, Request


def require(scope: str) -> Callable[[Request], None]:
    def check(request: Request) -> None:
        tokens: dict[str, list[str]] = request.app.state.settings.tokens
        if not tokens:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        granted: list[str] | None = None
        if scheme.lower() == "bearer" and token:
            for known, scopes in tokens.items():
                if hmac.compare_digest(known.encode(), token.strip().encode()):
                    granted = scopes
        if granted is None:
            raise HTTPException(401, detail={"error": "missing or unknown bearer token", "field": "authorization"},
                                headers={"WWW-Authenticate": "Bearer"})
        if scope not in granted and "admin" not in granted:
            raise HTTPException(403, detail={"error": f"token lacks the {scope!r} scope", "field": "authorization"})

    return check
