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

import asyncio
import time
import zlib
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.http.auth import may, require
from api.http.errors import as_http, client_error
from api.http.peer_client import peer_client
from api.http.routes import ERRORS
from api.http.store_time import parse_store_time
from api.kafka import group_admin
from api.kafka.context import Context
from broker.partitions.kafka_clients.group_admin import LeaderFigures, ResetSpec

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
        async with peer_client(PEER_TIMEOUT_S) as client:
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
    return sorted((r for r in rows if may(request, "describe", "group", r["group"])), key=lambda r: r["group"])


@router.get("/v1/groups/{group}", dependencies=[Depends(require("read"))])
async def describe_group(group: GroupPath, request: Request) -> Any:
    ctx, forwarded = await _at_coordinator(request, group)
    if forwarded is not None:
        return forwarded
    assert ctx is not None
    view = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.view_now, ctx, group)
    body = await _off_loop(group_admin.describe, ctx, group, view)
    await _from_leaders(request, ctx, body)
    return body


class _Leaders:
    """The partitions of some topics led by another node, with their leaders' own figures (this node's trail the
    leader's by up to an upload interval): `led[(topic, partition)]` the leader's node id, `rows[...]` the
    leader's GET /v1/console/partitions row (missing when the leader did not answer)."""

    def __init__(self, request: Request, ctx: Context) -> None:
        self.request, self.ctx = request, ctx
        self.led: dict[tuple[str, int], int] = {}
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.http: dict[int, str] = {}
        headers = {FORWARDED: "1"}
        if "authorization" in request.headers:
            headers["authorization"] = request.headers["authorization"]
        self.client = peer_client(PEER_TIMEOUT_S, headers)

    async def load(self, topics: list[str]) -> None:
        node = self.request.app.state.backend

        def leaders() -> dict[tuple[str, int], int]:
            out = {}
            for t in topics:
                try:
                    rows = node.partitions_overview(t)
                except LookupError:
                    continue  # an unknown topic: the plan names it
                out.update({(t, p["partition"]): p["leader"] for p in rows
                            if p["leader"] is not None and p["leader"] != self.ctx.node_id})
            return out

        self.led = await run_in_threadpool(leaders)
        if not self.led:
            return
        alive = await run_in_threadpool(node.cluster.membership.alive)
        self.http = {n.node_id: n.http.rstrip("/") for n in alive.values() if n.http}

        async def ask(leader: int, topic: str) -> None:
            if leader not in self.http:
                return
            try:
                r = await self.client.get(f"{self.http[leader]}/v1/console/partitions", params={"topic": topic})
            except httpx.HTTPError:
                return
            if r.status_code == 200:
                self.rows.update({(topic, p["partition"]): p for p in r.json()["partitions"] if p["owned"]})

        await asyncio.gather(*(ask(leader, t) for leader, t in {(leader, tp[0]) for tp, leader in self.led.items()}))

    async def get(self, tp: tuple[str, int], path: str, params: dict[str, Any]) -> Any:
        """GET `path` of the partition's leader: its JSON answer, None when it did not answer 200."""
        try:
            r = await self.client.get(self.http[self.led[tp]] + path, params=params)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, KeyError, ValueError):
            return None

    async def close(self) -> None:
        await self.client.aclose()


async def _from_leaders(request: Request, ctx: Context, body: dict[str, Any]) -> None:
    """Partitions led by another node: their start and end offsets, lag and lag_ms come from their leader
    (GET /v1/console/partitions, and the record at the committed offset). A leader that does not answer leaves
    this node's figures, marked `"stale": true`."""
    rows = [r for r in body["offsets"] if r["end_offset"] is not None]
    if not rows:
        return
    leaders = _Leaders(request, ctx)
    try:
        await leaders.load(sorted({r["topic"] for r in rows}))

        async def oldest(row: dict[str, Any], at: int) -> None:
            page = await leaders.get((row["topic"], row["partition"]),
                                     f"/v1/topics/{row['topic']}/partitions/{row['partition']}/messages",
                                     {"offset": at, "max": 1})
            if page and page["messages"]:
                row["lag_ms"] = max(int(time.time() * 1000) - int(page["messages"][0]["timestamp"]), 0)

        reads = []
        for row in rows:
            tp = (row["topic"], row["partition"])
            if tp not in leaders.led:
                continue
            p = leaders.rows.get(tp)
            if p is None:
                row["stale"] = True
                continue
            row.update(start_offset=p["start_offset"], end_offset=p["end_offset"])
            off = row["committed_offset"]
            if off is not None:
                row["lag"] = max(p["end_offset"] - max(off, p["start_offset"]), 0)
                row["lag_ms"] = 0
                if row["lag"]:
                    reads.append(oldest(row, max(off, p["start_offset"])))
        await asyncio.gather(*reads)
    finally:
        await leaders.close()
    body.update(group_admin.group_lag(body["offsets"]))


async def _leader_figures(request: Request, ctx: Context, group: str, topics: list[str],
                          spec: ResetSpec) -> dict[tuple[str, int], LeaderFigures]:
    """The figures a reset plans with for partitions led by another node (their leader's bounds, and the first
    offset at the time of a datetime reset, GET /v1/console/offset there). A leader that does not answer: this
    node's own figures are used."""
    names = await run_in_threadpool(group_admin.reset_topics, ctx, group, topics)
    leaders = _Leaders(request, ctx)
    out: dict[tuple[str, int], LeaderFigures] = {}
    try:
        await leaders.load(names)

        async def figures(tp: tuple[str, int], p: dict[str, Any]) -> None:
            at = None
            if spec.to == "datetime":
                found = await leaders.get(tp, "/v1/console/offset",
                                          {"topic": tp[0], "partition": tp[1], "time": spec.value})
                if found is None:
                    return
                at = found["offset"] if found["timestamp"] is not None else None
            out[tp] = LeaderFigures(p["start_offset"], p["end_offset"], at)

        await asyncio.gather(*(figures(tp, p) for tp, p in leaders.rows.items()))
    finally:
        await leaders.close()
    return out


@router.delete("/v1/groups/{group}", dependencies=[Depends(require("admin"))])
async def delete_group(group: GroupPath, request: Request) -> Any:
    ctx, forwarded = await _at_coordinator(request, group)
    if forwarded is not None:
        return forwarded
    assert ctx is not None
    members, had_state = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.hold_now, ctx, group)
    try:
        deleted = await _off_loop(group_admin.delete, ctx, group, members, had_state)
    finally:
        if not members:  # held: members that joined meanwhile waited, and join the group afresh
            await run_in_threadpool(group_admin.on_loop, ctx, group_admin.release_now, ctx, group, True)
    return {"group": group, "deleted": True, "offsets_deleted": deleted}


@router.post("/v1/groups/{group}/offsets", dependencies=[Depends(require("admin"))])
async def reset_offsets(group: GroupPath, body: ResetIn, request: Request) -> Any:
    ctx, forwarded = await _at_coordinator(request, group, body.model_dump(mode="json"))
    if forwarded is not None:
        return forwarded
    assert ctx is not None
    spec = body.spec()
    figures = await _leader_figures(request, ctx, group, body.topics, spec)
    if body.dry_run:
        members = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.members_now, ctx, group)
        plan = await _off_loop(group_admin.reset, ctx, group, body.topics, spec, True, members, figures)
        return {"group": group, "dry_run": True, "offsets": plan}
    members, _ = await run_in_threadpool(group_admin.on_loop, ctx, group_admin.hold_now, ctx, group)
    try:  # held (no members): a consumer joining now waits until the new offsets are stored, then reads them
        plan = await _off_loop(group_admin.reset, ctx, group, body.topics, spec, False, members, figures)
    finally:
        if not members:
            await run_in_threadpool(group_admin.on_loop, ctx, group_admin.release_now, ctx, group)
    return {"group": group, "dry_run": body.dry_run, "offsets": plan}
