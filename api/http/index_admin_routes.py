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
from api.http.metrics import published_merger
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


def _tiers(index: Any) -> list[dict[str, Any]]:
    spans = list(getattr(index.config, "merge_tiers_ms", ()))
    rows: dict[int, dict[str, Any]] = {t: {"tier": t, "span_ms": None if t == 0 else spans[t - 1], "files": 0,
                                           "bytes": 0, "items": 0, "states": {}}
                                       for t in range(len(spans) + 1)}
    for mf in index.files_map.files():
        tier = int(getattr(mf, "tier", 0))
        row = rows.setdefault(tier, {"tier": tier, "span_ms": None, "files": 0, "bytes": 0, "items": 0,
                                     "states": {}})
        row["files"] += 1
        row["bytes"] += int(mf.size_bytes)
        row["items"] += int(mf.items)
        state = mf.state.value
        row["states"][state] = row["states"].get(state, 0) + 1
    return [rows[t] for t in sorted(rows)]


def _filters(index: Any, backend: Any) -> dict[str, Any]:
    stats = index.lookup_stats.snapshot()
    local = index.filters
    published = getattr(getattr(getattr(backend, "cluster", None), "index", None), "filters", None)
    return {"enabled": bool(getattr(index.config, "key_filters", True)), "held": len(local),
            "bytes_held": local.bytes_held, "max_bytes": local.max_bytes,
            "answers_no": stats["filter_no"], "answers_maybe": stats["filter_maybe"],
            "false_positives": stats["false_positives"], "unusable": stats["filters_unusable"],
            "lookups": stats["lookups"],
            "published": None if published is None else {"bytes_held": published.bytes_held,
                                                         "max_bytes": published.max_bytes}}


def _merging(index: Any) -> dict[str, Any]:
    cfg = index.config
    merger = getattr(getattr(index, "background", None), "merger", None)
    merged = [mf for mf in index.files_map.files() if getattr(mf, "tier", 0) > 0 and mf.committed_ms]
    last = max(merged, key=lambda mf: mf.committed_ms, default=None)
    s = merger.stats if merger is not None else None
    return {"enabled": bool(cfg.merge_tiers_ms) and merger is not None, "tiers_ms": list(cfg.merge_tiers_ms),
            "settle_ms": cfg.merge_settle_ms, "min_files": cfg.merge_min_files,
            "backlog_files": s.backlog if s else 0, "merges": s.merges if s else 0,
            "files_merged": s.files_merged if s else 0, "bytes_written": s.bytes_written if s else 0,
            "last_merge_ms": None if last is None else last.committed_ms,
            "last_merged_file": None if last is None else last.stem,
            "awaiting_release": sum(len(mf.replaces) for mf in merged)}


def _cluster_merging(backend: Any) -> dict[str, Any]:
    """The failover leader's merges of departed nodes' and rescued index files (broker/cluster/published_merge.py):
    its settings and progress; `leader` False on the other nodes (and before the leader's first pass)."""
    merger = published_merger(backend)
    if merger is None:
        return {"leader": False}
    cfg, s = merger.config, merger.stats
    return {"leader": True, "tiers_ms": list(cfg.tiers_ms), "settle_ms": cfg.settle_ms, "grace_ms": cfg.grace_ms,
            "departed_ms": cfg.departed_ms, "max_inputs": cfg.max_inputs, "max_items": cfg.max_items,
            **dataclasses.asdict(s)}


@router.get("/v1/admin/index/status", dependencies=[Depends(require("read"))])
async def index_status(request: Request) -> dict[str, Any]:
    """The index as the console's Index page shows it (read scope), from this node's memory:

    - `tiers`: per merge tier (0: files as written; n: merged into the n-th span of `merge_tiers_ms`) the files,
      bytes, items and files per state;
    - `filters`: the key filters held in memory (count, bytes, bound) and their answers since the start
      (`answers_no`: files skipped, `answers_maybe`: files read, false positives, unusable filters);
    - `merging`: the backlog of files waiting in closed windows (as of the last merge cycle), merges made, inputs
      merged, bytes written, the newest merged file still live and when it committed, inputs awaiting deletion
      after the grace;
    - `cluster_merging`: the failover leader's merges of published files (departed nodes', rescued ones): its
      settings, passes, merges, inputs merged, bytes written, backlog, inputs awaiting deletion, the last merge."""
    index, _dispatcher = _index(request)
    backend = request.app.state.backend

    def read() -> dict[str, Any]:
        return {"tiers": _tiers(index), "filters": _filters(index, backend), "merging": _merging(index),
                "cluster_merging": _cluster_merging(backend)}

    return await run_in_threadpool(read)
