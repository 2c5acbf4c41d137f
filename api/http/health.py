"""Liveness and readiness: `/healthz` and `/healthz/live` answer 200 while the process serves requests, and 503
`{"status": REASON, "live": false}` once its node failed for good (its WAL failed: it acknowledges nothing more
until it is restarted, docs/OPERATIONS.md): restart the process when they do not answer 200. `/healthz/ready`
answers 200 only while the node accepts writes and its object store answers (`mqindex serve` probes it), else 503
with the reason (for example "not accepting writes: out of disk on /data/wal", or "the object store (--store) does
not answer: ..."). Reads go on while a node is not ready. A 503 carries `Retry-After`, as every 503 does."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.http.errors import retry_after

#: the reason the node does not accept writes now, None when it does
Readiness = Callable[[], str | None]

router = APIRouter(include_in_schema=False)


@router.get("/healthz")
@router.get("/healthz/live")
def live(request: Request) -> JSONResponse:
    liveness: Readiness | None = getattr(request.app.state, "liveness", None)
    reason = liveness() if liveness is not None else None
    if reason is None:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": reason, "live": False}, status_code=503, headers=retry_after(503, None))


@router.get("/healthz/ready")
def ready(request: Request) -> JSONResponse:
    readiness: Readiness | None = getattr(request.app.state, "readiness", None)
    reason = readiness() if readiness is not None else None
    if reason is None:
        return JSONResponse({"status": "ok", "ready": True})
    return JSONResponse({"status": reason, "ready": False}, status_code=503, headers=retry_after(503, None))
