"""Consumer groups over HTTP (what kafka-consumer-groups shows and does, in JSON):

    GET    /v1/groups                     every group of the cluster: state, protocol, members, coordinator node
    GET    /v1/groups/{group}             (read) members (client id, host, assigned partitions) and per partition the
                                          committed offset, end offset, lag and lag_ms (age of the oldest
                                          unconsumed message); 404 for a group without members or offsets
    DELETE /v1/groups/{group}             (admin) delete the group and its committed offsets; 409 while it has members
    POST   /v1/groups/{group}/offsets     (admin) reset offsets: {"to": earliest|latest|datetime|offset|shift,
                                          "datetime", "offset", "shift_by", "topics": ["t", "t:0,2"], "dry_run"};
                                          409 while the group has members (unless dry_run)

Groups are kept by the Kafka listeners (api/kafka/group_admin.py). A group's members are known only to its
coordinator node, so a node asked about another node's group (or a node without a listener) forwards the request
there with the caller's token; the list gathers every live node's groups. With no listener in the cluster there
are no groups (404).
"""

from __future__ import annotations

import zlib
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.http.auth import require
from api.http.errors import as_http, client_error
from api.http.routes import ERRORS
from api.http.store_time import parse_store_time
from api.kafka import group_admin
from api.kafka.context import Context
from broker.partitions.kafka_clients.group_admin import ResetSpec

router = APIRouter(responses=ERRORS)
FORWARDED = "x-mqindex-forwarded"  # a request one node passed to another: answered there, never passed on
GroupPath = Annotated[str, Path(min_length=1, max_length=255, description="consumer group id")]
PEER_TIMEOUT_S = 10.0


class ResetIn(BaseModel):
    to: Literal["earliest", "latest", "datetime", "offset", "shift"] = Field(
        description="earliest / latest: the partition's start / end; datetime: the first message at or after "
                    "`datetime`; offset: `offset`; shift: the committed offset moved by `shift_by`")
    datetime: int | str | None = Field(None, description="with to=datetime: ms since the epoch or ISO 8601 "
                                                         "(UTC when it has no zone)")
    offset: int | None = Field(None, ge=0, description="with to=offset")
    shift_by: int | None = Field(None, description="with to=shift: + forward, - back")
    topics: list[str] = Field([], description="`topic` (every partition) or `topic:0,2`; default: every "
                                              "partition the group has committed")
    dry_run: bool = Field(False, description="show the new offsets without storing them")

    def spec(self) -> ResetSpec:
        need = {"datetime": "datetime", "offset": "offset", "shift": "shift_by"}.get(self.to)
        value = getattr(self, need) if need else 0
        if need and value is None:
            raise client_error(need, f"is required with to={self.to}")
        if isinstance(value, str):
            try:
                value = parse_store_time(value)
            except ValueError as exc:
                raise client_error(need or "datetime", str(exc)) from None
        if self.to == "datetime" and value < 0:
            raise client_error("datetime", f"must be at or after the epoch (got {value})")
        return ResetSpec(self.to, int(value))


NO_LISTENER = ("no node of the cluster has a Kafka listener (start one with --kafka-listener): there are no "
               "consumer groups")


def _context(request: Request) -> Context | None:
    """The Kafka listener's context, None when this node has no listener (it forwards to the nodes that do)."""
    return getattr(request.app.state, "kafka_context", None)


def _coordinator_of(request: Request, group: str) -> int | None:
    """The node coordinating `group` (Context.coordinator_for's rule), None when no live node has a listener."""
    ctx = _context(request)
    if ctx is not None:
        return ctx.coordinator_for(group)
    node = request.app.state.backend
    ids = sorted(n.node_id for n in node.cluster.membership.alive().values() if n.kafka)
    return ids[zlib.crc32(group.encode("utf-8")) % len(ids)] if ids else None


async def _off_loop(fn: Any, *args: Any) -> Any:
    try:
        return await run_in_threadpool(fn, *args)
    except group_admin.GroupNotEmpty as exc:
        raise client_error("group", str(exc).removeprefix("group "), 409) from exc
    except Exception as exc:
        http = as_http(exc)
        if http is None:
            raise
        raise http from exc


def _peers(request: Request) -> dict[int, str]:
    """node id -> HTTP address of every other live node with a Kafka listener."""
    node = request.app.state.backend
    return {n.node_id: n.http.rstrip("/") for n in node.cluster.membership.alive().values()
            if n.node_id != node.node_id and n.kafka and n.http}


async def _forward(request: Request, base: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {FORWARDED: "1"}
    if "authorization" in request.headers:
        headers["authorization"] = request.headers["authorization"]
    try:
        async with httpx.AsyncClient(timeout=PEER_TIMEOUT_S) as client:
            r = await client.request(request.method, base + path, headers=headers, json=body)
    except httpx.HTTPError as exc:
        raise HTTPException(503, detail={"error": f"node at {base} did not answer: {exc}", "field": None}) from exc
    return r.status_code, r.json()


async def _at_coordinator(request: Request, group: str, body: Any = None) -> tuple[Context, JSONResponse | None]:
    """(this node's Kafka context, None) when this node answers for `group`; else the coordinator's answer."""
    ctx = _context(request)
    if ctx is not None and request.headers.get(FORWARDED):
        return ctx, None
    node = await run_in_threadpool(_coordinator_of, request, group)
    if node is None:
        raise client_error("group", f"{group!r} does not exist: {NO_LISTENER}", 404)
    if ctx is not None and node == ctx.node_id:
        return ctx, None
    base = (await run_in_threadpool(_peers, request)).get(node)
    if base is None:
        raise HTTPException(503, detail={"error": f"group {group!r} is coordinated by node {node}, whose HTTP "
                                                  "address is not known", "field": None})
    status, answer = await _forward(request, base, request.url.path, body)
    return ctx, JSONResponse(answer, status_code=status)  # type: ignore[arg-type]


@router.get("/v1/groups", dependencies=[Depends(require("read"))])
async def list_groups(request: Request) -> list[dict[str, Any]]:
    ctx = _context(request)
    rows: list[dict[str, Any]] = []
    if ctx is not None:
        views = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.views_now, ctx)
        rows = await _off_loop(group_admin.list_local, ctx, views)
    if not request.headers.get(FORWARDED):
        for base in (await run_in_threadpool(_peers, request)).values():
            status, answer = await _forward(request, base, "/v1/groups")
            if status != 200:
                raise HTTPException(503, detail={"error": f"node at {base} answered {status}: {answer}",
                                                 "field": None})
            rows += answer
    return sorted(rows, key=lambda r: r["group"])


@router.get("/v1/groups/{group}", dependencies=[Depends(require("read"))])
async def describe_group(group: GroupPath, request: Request) -> Any:
    ctx, forwarded = await _at_coordinator(request, group)
    if forwarded is not None:
        return forwarded
    assert ctx is not None
    view = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.view_now, ctx, group)
    return await _off_loop(group_admin.describe, ctx, group, view)


@router.delete("/v1/groups/{group}", dependencies=[Depends(require("admin"))])
async def delete_group(group: GroupPath, request: Request) -> Any:
    ctx, forwarded = await _at_coordinator(request, group)
    if forwarded is not None:
        return forwarded
    assert ctx is not None
    had_state = await run_in_threadpool(group_admin.on_loop, ctx, lambda: group in ctx.coordinator.groups)
    members = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.forget_now, ctx, group)
    deleted = await _off_loop(group_admin.delete, ctx, group, members, had_state)
    return {"group": group, "deleted": True, "offsets_deleted": deleted}


@router.post("/v1/groups/{group}/offsets", dependencies=[Depends(require("admin"))])
async def reset_offsets(group: GroupPath, body: ResetIn, request: Request) -> Any:
    ctx, forwarded = await _at_coordinator(request, group, body.model_dump(mode="json"))
    if forwarded is not None:
        return forwarded
    assert ctx is not None
    spec = body.spec()
    members = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.members_now, ctx, group)
    plan = await _off_loop(group_admin.reset, ctx, group, body.topics, spec, body.dry_run, members)
    return {"group": group, "dry_run": body.dry_run, "offsets": plan}
