"""One mapping from errors to HTTP responses, for every error the server answers, framework ones included.

- bad input: a 4xx with a JSON body {"error", "field"} naming the field at fault (also an unparsable body,
  an unknown route (404; a path a trailing slash away from a route's names that route's path), a wrong method
  (405), a body over the size limit or a value over its topic's max.message.bytes (413) and every validation
  error, which is a 400, never a 422, told in one plain sentence: api/http/plain_errors.py);
- damage in the store (a broker object or an index file failing a check when read back): 502 with
  {"error", "field": null, "object", "check"} naming the object key and the failed check (OPERATIONS.md);
- the store or the metadata unavailable, the WAL failed (WalError, naming it), or this node fenced: 503 (the
  metadata database not answering or a failed WAL, whichever route meets it: 503 naming it). Every 503 carries
  `Retry-After` (`retry_after`, the one place that chooses it);
- every message is passed through the redactor (api/security/redact.py): no password or key of a URL, no
  token, ever reaches a client;
- anything else: 500 with {"error", "field": null}, never plain text.
- out of disk (a write refused below the free-space floor, or by the filesystem: ENOSPC, EDQUOT, EIO): 507
  Insufficient Storage with `Retry-After`; reads go on and the same request succeeds once space returns
  (docs/OPERATIONS.md, "Disk full").
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.http.models import FieldError
from api.http.plain_errors import plain
from api.security.redact import REDACTOR
from broker.errors import (
    Fenced,
    MessageIdError,
    MetadataUnavailable,
    NodeClosed,
    NodeNotLive,
    NotLeader,
    ObjectFormatError,
    OutOfDisk,
    WalError,
)
from broker.partitions.message_size import MessageTooLarge
from broker.partitions.topic_errors import TopicExists
from index_file.errors import FormatError
from storage_tier import OutOfSpace, StorageUnavailable

#: seconds a client is told to wait before retrying a write refused for lack of disk space
OUT_OF_DISK_RETRY_AFTER_S = 5

#: seconds a client is told to wait before retrying a write a failed WAL refused (another node takes the partition
#: over once this one's lease expires, or this one is restarted)
WAL_RETRY_AFTER_S = 5

#: seconds a client is told to wait before retrying a request refused while the metadata database does not answer,
#: and any other 503 (the object store not answering, this node fenced, a peer that did not answer)
METADATA_RETRY_AFTER_S = 2

log = logging.getLogger("mqindex.api.errors")

#: the status of damage found in the store: the server's upstream (the object store) gave back bad bytes
DAMAGE_STATUS = 502


def damage_of(exc: BaseException) -> tuple[str, str, str] | None:
    """(component, object, check) when `exc` is damage found in the store, else None."""
    if isinstance(exc, ObjectFormatError):
        return "broker", exc.key, exc.check
    if isinstance(exc, FormatError):
        return "index", exc.path, exc.check
    return None


def status_for(exc: Exception) -> tuple[int, str | None]:
    field = getattr(exc, "field", None)
    if damage_of(exc) is not None:  # before ValueError: index FormatError is one, yet never the client's fault
        return DAMAGE_STATUS, None
    if isinstance(exc, FieldError):
        return exc.status, exc.field
    if isinstance(exc, NodeNotLive):
        return 409, "to"
    if isinstance(exc, TopicExists):
        return 409, field
    if isinstance(exc, MessageIdError):
        return 400, "msg_id"
    if isinstance(exc, MessageTooLarge):
        return 413, field
    if isinstance(exc, LookupError):
        return 404, field
    if isinstance(exc, NotLeader):
        return 421, "partition"
    if isinstance(exc, (OutOfDisk, OutOfSpace)):
        return 507, None
    # WalError: the WAL (or --wal's store) takes no writes; NodeClosed: a clean stop, the others take over
    if isinstance(exc, (Fenced, StorageUnavailable, WalError, NodeClosed)):
        return 503, None
    if isinstance(exc, ValueError):
        return 400, field
    return 500, None


#: why a body nested past what the JSON parsers read (pydantic's, the json module's) is refused, on every route
#: that reads a body
TOO_DEEP = "its arrays and objects are nested too deeply"


def unparsable_body(cause: BaseException | None) -> str | None:
    """The reason FastAPI's body parsing failed (it says only "There was an error parsing the body")."""
    if isinstance(cause, RecursionError):
        return f"body is not valid JSON: {TOO_DEEP}"
    if isinstance(cause, UnicodeError):
        return "body is not valid JSON: it is not UTF-8 text"
    return None


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        message, field = plain(errors[0], exc.body) if errors else ("bad request", None)
        return JSONResponse(status_code=400, content=REDACTOR.value({"error": message, "field": field}))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        twin = slash_twin(request) if exc.status_code == 404 and not isinstance(exc.detail, dict) else None
        if isinstance(exc.detail, dict):
            body = exc.detail
        elif twin is not None:
            body = {"error": f"no route {request.method} {request.url.path}: the path is {twin} ("
                             f"{'without' if len(twin) < len(request.url.path) else 'with'} the trailing slash)",
                    "field": "path"}
        else:
            field = "body" if exc.status_code in (400, 413) else None
            reason = unparsable_body(exc.__cause__) if exc.status_code == 400 else None
            body = {"error": reason or str(exc.detail), "field": field}
        # a 503 raised by a route without the header (e.g. a peer node that did not answer) gets one too
        headers = getattr(exc, "headers", None) or retry_after(exc.status_code, exc.__cause__)
        return JSONResponse(status_code=exc.status_code, content=REDACTOR.value(body), headers=headers)

    @app.exception_handler(ObjectFormatError)
    @app.exception_handler(FormatError)
    async def damaged(request: Request, exc: Exception) -> JSONResponse:
        component, obj, check = damage_of(exc)  # type: ignore[misc]
        request.app.state.metrics.corrupt_read(component, obj, check, str(exc))
        return JSONResponse(status_code=DAMAGE_STATUS, content=REDACTOR.value(damage_body(exc)))

    @app.exception_handler(MetadataUnavailable)
    async def metadata_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # no traceback per request: the metadata link logs each change of state once (broker/metadata/pg_link.py)
        return JSONResponse(status_code=503, content=REDACTOR.value({"error": str(exc), "field": None}),
                            headers=retry_after(503, exc))

    @app.exception_handler(WalError)
    async def wal_error(request: Request, exc: Exception) -> JSONResponse:
        # a failed WAL (its store did not answer within its retry bound, an I/O error) or a full disk: 503 naming
        # the WAL, 507 for the disk; a failed node fails /healthz/live too (restart it, docs/OPERATIONS.md)
        http = as_http(exc)
        assert http is not None
        return JSONResponse(status_code=http.status_code, content=REDACTOR.value(http.detail), headers=http.headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error", exc_info=exc, extra={"path": request.url.path})
        return JSONResponse(status_code=500, content={"error": f"internal error: {type(exc).__name__}",
                                                      "field": None})


def slash_twin(request: Request) -> str | None:
    """The request's path with its trailing slash removed (or one added) when a route takes that path with the
    request's method: what a 404 for it names. One path per route, no redirect: a 307 answer to a POST has no body
    and a client that does not follow it gets nothing useful; serving both paths would give every resource two
    names (the OpenAPI document, the metrics' route labels, the ACL and token checks know one)."""
    path = request.url.path
    twin = path.rstrip("/") if path.endswith("/") else path + "/"
    if not twin or twin == path:
        return None
    scope = dict(request.scope, path=twin)
    for route in request.app.router.routes:
        if route.matches(scope)[0] == Match.FULL:
            return twin
    return None


def damage_body(exc: Exception) -> dict[str, Any]:
    _component, obj, check = damage_of(exc)  # type: ignore[misc]
    return {"error": f"damaged in the store: {exc}", "field": None, "object": obj, "check": check}


def as_http(exc: Exception) -> HTTPException | None:
    """The HTTPException for a backend error that is the client's doing (or a 503), None for damage in the
    store (its own handler answers it) and for a real fault."""
    status, field = status_for(exc)
    if status in (500, DAMAGE_STATUS):
        return None
    detail: dict[str, object] = {"error": str(exc), "field": field}
    if isinstance(exc, NotLeader):  # retriable at the leader
        detail |= {"leader": exc.leader, "leader_url": exc.leader_url}
    return HTTPException(status, detail=detail, headers=retry_after(status, exc))


def retry_after(status: int, exc: BaseException | None) -> dict[str, str] | None:
    """The `Retry-After` header of an answer with this status for `exc` (None: no header). Every 503 and 507
    carries one, whichever way it is answered (a route's `call`, an exception handler, an HTTPException a route
    raises): out of disk 507, a failed WAL 503 (`WAL_RETRY_AFTER_S`), any other 503 (the metadata database or the
    store not answering, this node fenced) `METADATA_RETRY_AFTER_S`."""
    if status == 507:
        return {"Retry-After": str(OUT_OF_DISK_RETRY_AFTER_S)}
    if status != 503:
        return None
    if isinstance(exc, WalError):
        return {"Retry-After": str(WAL_RETRY_AFTER_S)}
    return {"Retry-After": str(METADATA_RETRY_AFTER_S)}


def client_error(field: str, message: str, status: int = 400) -> HTTPException:
    """A 4xx naming the field at fault."""
    return HTTPException(status, detail={"error": f"{field} {message}", "field": field})
