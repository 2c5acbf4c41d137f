"""Admin routes that move the node's index files between states on demand: seal and compact the WRITING file
now (optionally keeping the compacted file local for a while), and run one index maintenance cycle now
(compact, upload, expire). Operators use them before a planned stop or to check an upload; the lookup report
(`mqindex bench report`) uses them to measure a key in each state of its file."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from api.http.auth import require
from api.http.errors import client_error
from api.http.routes import ERRORS

router = APIRouter(responses=ERRORS)
MAX_HOLD_S = 7 * 24 * 3600


def _index(request: Request) -> tuple[Any, Any]:
    """The node's IndexService and the dispatcher feeding it (None when the node has none)."""
    backend = request.app.state.backend
    index = getattr(backend, "index", None)
    if index is None:
        raise client_error("index", "this server has no index service", status=404)
    return index, getattr(backend, "dispatcher", None)


def _file_row(info: Any) -> dict[str, Any]:
    return {"name": info.name, "state": info.state.value, "items": info.items, "size_bytes": info.size_bytes,
            "location": info.location}


@router.post("/v1/admin/index/roll", dependencies=[Depends(require("admin"))])
async def roll_index(request: Request,
                     hold_upload_s: Annotated[float, Query(ge=0, le=MAX_HOLD_S, description=(
                         "seconds the compacted file stays local before the background uploads it "
                         "(POST /v1/admin/index/maintain uploads it at once)"))] = 0) -> dict[str, Any]:
    """Seal the WRITING file (after every acknowledged record is indexed) and compact it now. The answer names
    the file rolled (null: the WRITING file was empty) and lists every index file with its state and size."""
    index, dispatcher = _index(request)

    def run() -> dict[str, Any]:
        if dispatcher is not None:
            dispatcher.wait_idle(600)
        rolled = index.compact_now(hold_upload_s)
        return {"rolled": rolled, "files": [_file_row(f) for f in index.files()]}

    return await run_in_threadpool(run)


@router.post("/v1/admin/index/maintain", dependencies=[Depends(require("admin"))])
async def maintain_index(request: Request) -> dict[str, Any]:
    """One index maintenance cycle now, ignoring retry backoff and upload holds: roll an aged WRITING file,
    compact sealed files, upload compacted ones, expire files past retention. The answer is what it did and
    every index file with its state and size."""
    index, _dispatcher = _index(request)

    def run() -> dict[str, Any]:
        report = index.maintain()
        return {**dataclasses.asdict(report), "files": [_file_row(f) for f in index.files()]}

    return await run_in_threadpool(run)
