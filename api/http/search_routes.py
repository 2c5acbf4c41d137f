"""Value searches as Spark jobs, for the console's Value search page (api/web/search.js):

    POST   /v1/searches               {topic, where?, key?, from?, to?, limit?} -> 202 {id, state, ...}
    GET    /v1/searches               the node's recent searches (those of topics the caller may read)
    GET    /v1/searches/{id}[?after=N]  state, progress, matches so far (from the N-th), error
    DELETE /v1/searches/{id}          cancel: its Spark jobs are cancelled; answers its final state

A search reads the topic straight from the object store (jobs/value_search.py, the code of `mqindex search`);
`where` is a Spark SQL predicate over key, value, headers (text), topic, partition, offset, timestamp. A read
token may search (it is a read); the caller needs READ on the topic (403 otherwise, the same whether the topic
exists or not). Bad input (unknown topic, a predicate Spark refuses, bad times, a limit past
search_max_rows) is a 400 naming the field and starts nothing; past search_max_concurrent running searches a
429. The first search of a node starts its Spark session (seconds).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from starlette.concurrency import run_in_threadpool

from api import node_settings
from api.http.auth import check, may, principal, require
from api.http.errors import client_error
from api.http.models import ErrorOut
from api.http.routes import ERRORS
from api.http.search_jobs import SearchBusy, SearchManager
from jobs.value_search import SearchError, SearchSpec, parse_time, plan_search

router = APIRouter(responses={**ERRORS, 429: {"model": ErrorOut, "description": "search_max_concurrent searches run"}})


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    topic: StrictStr = Field(min_length=1, max_length=249, description="the topic to search")
    where: StrictStr | None = Field(None, min_length=1, max_length=4096,
                              description="Spark SQL predicate over key, value, headers (text), topic, partition, "
                                          "offset, timestamp, e.g. \"value LIKE '%failed%'\"")
    key: StrictStr | list[StrictStr] | None = Field(None, description="a key or keys to match (raw key, exact)")
    from_: StrictInt | StrictStr | None = Field(None, alias="from",
                                                description="window start (inclusive): ms or ISO 8601")
    to: StrictInt | StrictStr | None = Field(None, description="window end (exclusive): ms or ISO 8601")
    limit: StrictInt | None = Field(None, ge=1,
                                    description="stop after this many matches (at most search_max_rows)")


def setting(request: Request, name: str) -> Any:
    return node_settings.value(request.app.state.settings.node, name)


def manager(request: Request) -> SearchManager:
    m: SearchManager | None = getattr(request.app.state, "searches", None)
    if m is None:
        m = request.app.state.searches = SearchManager(
            getattr(request.app.state.settings, "search_master", "") or "",
            int(setting(request, "search_max_concurrent")), int(setting(request, "search_max_rows")))
    return m


def _spec(request: Request, body: SearchIn) -> SearchSpec:
    keys = [body.key] if isinstance(body.key, str) else list(body.key or [])
    if not body.where and not keys:
        raise SearchError("where", "give a predicate (where) or a key to search for")
    if any(not k for k in keys):
        raise SearchError("key", "an empty key matches nothing")
    settings = request.app.state.settings
    return SearchSpec(topic=body.topic, metadata=settings.metadata, store=settings.store, keys=tuple(keys),
                      where=body.where, from_ms=parse_time(body.from_, "from"), to_ms=parse_time(body.to, "to"))


def _found(request: Request, search_id: str) -> Any:
    s = manager(request).get(search_id)
    if s is None:
        raise client_error("id", f"{search_id!r}: no such search on this node", status=404)
    check(request, "read", "topic", s.spec.topic)
    return s


@router.post("/v1/searches", status_code=202, dependencies=[Depends(require("read"))])
async def start_search(request: Request, body: SearchIn) -> JSONResponse:
    """Start a value search; 202 with its id and state (poll GET /v1/searches/{id})."""
    check(request, "read", "topic", body.topic)  # before anything says whether the topic exists
    m = manager(request)
    if m.max_concurrent < 1:
        raise client_error("search", "value searches are off on this node (search_max_concurrent=0)", status=403)
    limit = body.limit or m.max_rows
    if limit > m.max_rows:
        raise client_error("limit", f"must be at most {m.max_rows} (search_max_rows), got {limit}")
    try:
        spec = _spec(request, body)
        planned = await run_in_threadpool(plan_search, spec)
        s = await run_in_threadpool(m.start, spec, planned, limit, principal(request).name)
    except SearchError as exc:
        message = exc.message
        if exc.field == "topic" and message.startswith("unknown topic"):
            message = f"unknown topic {body.topic!r}"  # not the names of the others (the caller may not see them)
        raise client_error(exc.field, message) from None
    except SearchBusy as exc:
        raise HTTPException(429, detail={"error": str(exc), "field": "search"}) from None
    return JSONResponse(s.view(m.sc), status_code=202)


@router.get("/v1/searches", dependencies=[Depends(require("read"))])
async def list_searches(request: Request) -> dict[str, Any]:
    """The node's recent searches, newest first, without their matches."""
    m = manager(request)
    out = []
    for s in m.recent():
        if may(request, "read", "topic", s.spec.topic):
            v = s.view(m.sc)
            v.pop("matches")
            out.append(v)
    return {"searches": out, "max_concurrent": m.max_concurrent, "max_rows": m.max_rows}


@router.get("/v1/searches/{search_id}", dependencies=[Depends(require("read"))])
async def get_search(request: Request, search_id: str,
                     after: int = Query(0, ge=0, description="matches from this index on")) -> dict[str, Any]:
    s = _found(request, search_id)
    return await run_in_threadpool(s.view, manager(request).sc, after)  # type: ignore[no-any-return]


@router.delete("/v1/searches/{search_id}", dependencies=[Depends(require("read"))])
async def cancel_search(request: Request, search_id: str) -> dict[str, Any]:
    """Cancel the search (its running Spark jobs are cancelled); answers once it stopped (at most 30 s)."""
    s = _found(request, search_id)
    m = manager(request)
    await run_in_threadpool(m.cancel, s)
    return await run_in_threadpool(s.view, m.sc, len(s.matches))  # type: ignore[no-any-return]
