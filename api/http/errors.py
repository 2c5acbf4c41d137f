"""One mapping from errors to HTTP responses: a JSON body {"error", "field"} and a 4xx for bad input.

Out of disk (a write refused below the free-space floor, or by the filesystem: ENOSPC, EDQUOT, EIO) answers
507 Insufficient Storage with `Retry-After`: the node itself is fine, reads go on, and the same request
succeeds once space returns (docs/OPERATIONS.md, "Disk full")."""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from api.http.models import FieldError
from broker.errors import Fenced, MessageIdError, OutOfDisk
from broker.partitions.topic_errors import TopicExists
from storage_tier import OutOfSpace, StorageUnavailable

#: seconds a client is told to wait before retrying a write refused for lack of disk space
OUT_OF_DISK_RETRY_AFTER_S = 5


def status_for(exc: Exception) -> tuple[int, str | None]:
    field = getattr(exc, "field", None)
    if isinstance(exc, FieldError):
        return exc.status, exc.field
    if isinstance(exc, TopicExists):
        return 409, field
    if isinstance(exc, MessageIdError):
        return 400, "msg_id"
    if isinstance(exc, LookupError):
        return 404, field
    if isinstance(exc, (OutOfDisk, OutOfSpace)):
        return 507, None
    if isinstance(exc, (Fenced, StorageUnavailable)):
        return 503, None
    if isinstance(exc, ValueError):
        return 400, field
    return 500, None


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "bad request"}
        field = ".".join(str(p) for p in first["loc"] if p not in ("body", "query", "path")) or None
        return JSONResponse(status_code=400, content={"error": f"{field}: {first['msg']}" if field else first["msg"],
                                                      "field": field})

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        body = exc.detail if isinstance(exc.detail, dict) else {"error": str(exc.detail), "field": None}
        return JSONResponse(status_code=exc.status_code, content=body, headers=exc.headers)


def as_http(exc: Exception) -> HTTPException | None:
    """The HTTPException for a backend error that is the client's doing (or a 503), None for a real fault."""
    status, field = status_for(exc)
    if status == 500:
        return None
    headers = {"Retry-After": str(OUT_OF_DISK_RETRY_AFTER_S)} if status == 507 else None
    return HTTPException(status, detail={"error": str(exc), "field": field}, headers=headers)


def client_error(field: str, message: str, status: int = 400) -> HTTPException:
    """A 4xx naming the field at fault."""
    return HTTPException(status, detail={"error": f"{field} {message}", "field": field})
