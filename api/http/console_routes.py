"""Read-only views the web console (api/web/) needs beside the existing routes (/v1/topics, /v1/cluster/nodes,
/v1/index/files, /v1/admin/compaction, /v1/admin/reassignments):

    GET /v1/console/partitions[?topic=T]  every partition: leader node and epoch, stream epoch, offsets, bytes
    GET /v1/console/objects               stream set objects / stream objects (counts, bytes), last compaction
    GET /v1/console/index                 index files with their upload lag
    GET /v1/console/node                  this node: WAL bytes not yet uploaded, disk and failure state
    GET /v1/console/session               the caller's scopes (the page disables the actions it may not take)
    GET /v1/console/throughput[?scope=node]  messages/s and bytes/s over the last hour, per topic (summed over
                                          the cluster's nodes) and per node, from each node's in-memory history
                                          (broker/partitions/throughput.py); scope=node: this node's only
    GET /v1/console/offset?topic=T&partition=P&time=  the first offset stored at or after a time (the message
                                          browser's "from a time"); the end offset when none is
    GET /v1/console/newest?topic=T&n=N    the newest N messages over all partitions of a topic in one answer (the
                                          message browser's first page), with every partition's offsets
    POST /v1/console/page?topic=T          a page of the message browser over several partitions in one answer:
                                          next / previous from per-partition positions, from an offset, from a
                                          time, or the newest N, merged by store time (api/http/merged_pages.py)
    GET /console/{name}.js                the console's scripts (api/web/*.js), like the page itself without a token
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from starlette.concurrency import run_in_threadpool

from api.http import merged_pages
from api.http.auth import may, principal, require
from api.http.errors import as_http, client_error
from api.http.models import MAX_INT, MAX_PAGE, TOPIC_PATTERN
from api.http.peer_client import peer_client
from api.http.routes import ERRORS, TIME_FORMS, message_out
from api.http.store_time import StoreTime
from api.security.principals import SCOPES
from broker import overview
from broker.partitions.kafka_clients.client_reads import offset_for_time
from broker.partitions.topic_errors import InvalidTopicName
from broker.partitions.topics import validate_topic_name

router = APIRouter(responses=ERRORS, tags=["console"])
WEB = Path(__file__).parent.parent / "web"
SCRIPTS = {f.stem: f.read_text() for f in sorted(WEB.glob("*.js"))}  # read once, as the page is
SCRIPT_TAG = re.compile(r'<script src="/console/([a-z_]+)\.js"></script>')
PEER_TIMEOUT_S = 5.0


def page_with_scripts() -> str:
    """The console's page with its scripts written into it: one answer instead of one request per script before the
    page can run (they are also served one by one, /console/NAME.js)."""
    def inline(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in SCRIPTS:
            raise LookupError(f"api/web/index.html names /console/{name}.js, which is not in {WEB}")
        return f"<script data-script=\"{name}\">\n{SCRIPTS[name]}</script>"

    return SCRIPT_TAG.sub(inline, (WEB / "index.html").read_text())


def _check_topic(topic: str) -> None:
    try:  # '.' and '..' pass the pattern; the broker's refusal would name its own field
        validate_topic_name(topic)
    except InvalidTopicName as exc:
        raise HTTPException(400, detail={"error": str(exc), "field": "topic"}) from exc


async def _node_call(request: Request, name: str, *args: Any) -> Any:
    fn = getattr(request.app.state.backend, name, None)
    if fn is None:
        raise client_error("console", "this server has no broker node to describe", status=404)
    return await _node_call_fn(fn, *args)


async def _node_call_fn(fn: Any, *args: Any) -> Any:
    try:
        return await run_in_threadpool(fn, *args)
    except Exception as exc:
        http = as_http(exc)
        if http is None:
            raise
        raise http from exc


@router.get("/v1/console/partitions", dependencies=[Depends(require("read"))])
async def console_partitions(request: Request,
                             topic: Annotated[str | None, Query(pattern=TOPIC_PATTERN)] = None) -> dict[str, Any]:
    """Every partition (of `topic`, or all): leader node and leader epoch, stream epoch, start/end offsets,
    bytes in object storage (stream objects exactly, a share of each stream set object by offsets)."""
    if topic is not None:
        _check_topic(topic)
    rows = await _node_call(request, "partitions_overview", topic)
    return {"partitions": [r for r in rows if may(request, "describe", "topic", r["topic"])]}  # ACL rules


@router.get("/v1/console/objects", dependencies=[Depends(require("read"))])
async def console_objects(request: Request) -> dict[str, Any]:
    """Stream set objects (per node) and stream objects: counts and bytes; compaction totals and last run."""
    return await _node_call(request, "objects_overview")  # type: ignore[no-any-return]


@router.get("/v1/console/index", dependencies=[Depends(require("read"))])
async def console_index(request: Request) -> dict[str, Any]:
    """Index files by state with time range, items, location and `upload_lag_ms` (local files only)."""
    files = await _node_call(request, "index_files")
    return {"files": overview.index_files(files)}


@router.get("/v1/console/node", dependencies=[Depends(require("read"))])
async def console_node(request: Request) -> dict[str, Any]:
    """This node: its id, WAL bytes not yet uploaded, the out-of-disk path and failure, if any."""
    return await _node_call(request, "node_overview")  # type: ignore[no-any-return]


@router.get("/v1/console/offset", dependencies=[Depends(require("read"))])
async def console_offset(request: Request, topic: Annotated[str, Query(pattern=TOPIC_PATTERN)],
                         partition: Annotated[int, Query(ge=0)],
                         time: Annotated[StoreTime, Query(description=f"store time: {TIME_FORMS}")]
                         ) -> dict[str, Any]:
    """The first offset of the partition whose message was stored at or after `time` (and its time); the
    partition's end offset (`timestamp` null) when every message is older."""
    _check_topic(topic)
    node = request.app.state.backend
    parts = getattr(node, "partitions", None)
    if parts is None:
        raise client_error("console", "this server has no broker node to describe", status=404)

    def find() -> dict[str, Any]:
        p = parts.partition(parts.topic(topic), partition)
        offset, stamp = offset_for_time(parts, p, time)
        if offset < 0:
            return {"offset": parts.bounds(p)[1], "timestamp": None}
        return {"offset": offset, "timestamp": stamp}

    return await _node_call_fn(find)


@router.get("/v1/console/newest", dependencies=[Depends(require("read"))])
async def console_newest(request: Request, topic: Annotated[str, Query(pattern=TOPIC_PATTERN)],
                         n: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20) -> dict[str, Any]:
    """The newest `n` messages over every partition of `topic`, oldest first by store time (then partition,
    offset): the last `n` of each partition are read and merged, so at most n x partitions messages are read
    and n are answered. `bounds` is every partition's start and end offset as read; `start` the first offset
    shown of each partition (its end when none is shown), `next` its end: the page's positions for paging."""
    _check_topic(topic)
    node = request.app.state.backend
    parts = getattr(node, "partitions", None)
    if parts is None:
        raise client_error("console", "this server has no broker node to describe", status=404)

    def newest() -> dict[str, Any]:
        t = parts.topic(topic)
        bounds: dict[int, tuple[int, int]] = {}
        got: list[Any] = []
        for i in range(t.partitions):
            start, end = parts.bounds(parts.partition(t, i))
            bounds[i] = (start, end)
            lo = max(start, end - n)
            if end > lo:
                got += [m for m in node.fetch(topic, i, lo, end - lo)[0] if m.offset < end]
        got.sort(key=lambda m: (m.timestamp, m.partition, m.offset))
        shown = got[-n:]
        first = {i: end for i, (_, end) in bounds.items()}
        for m in shown:
            first[m.partition] = min(first[m.partition], m.offset)
        return {"messages": [message_out(m) for m in shown],
                "bounds": {i: {"start": s, "end": e} for i, (s, e) in bounds.items()},
                "start": first, "next": {i: e for i, (_, e) in bounds.items()}}

    return await _node_call_fn(newest)


Offset = Annotated[int, Field(ge=0, le=MAX_INT)]
Positions = Annotated[dict[int, Offset], WithJsonSchema({
    "type": "object", "propertyNames": {"pattern": "^[0-9]{1,9}$"},
    "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_INT}})]


def _whole(value: object) -> object:
    """A time given as a JSON number with a zero fraction (60.0) is its integer."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


BodyTime = Annotated[StoreTime, BeforeValidator(_whole)]


class PageIn(BaseModel):
    """Where a page of the message browser starts: at most one of `after` (next), `before` (previous), `offset`
    or `time` (more is a 400); none: the newest `n`. A partition the topic does not have is a 404."""
    model_config = ConfigDict(extra="forbid")
    n: int = Field(20, ge=1, le=MAX_PAGE, description="messages in the page")
    partitions: list[Annotated[int, Field(ge=0)]] | None = Field(
        None, max_length=100_000, description="the partitions to page over with offset, time or newest (default all)")
    after: Positions | None = Field(None, description="partition -> offset: the first n messages from there "
                                                              "(a page's `next`: the next page)")
    before: Positions | None = Field(None, description="partition -> offset: the last n messages before "
                                                               "(a page's `start`: the previous page)")
    offset: Offset | None = Field(None, description="the first n messages from this offset of each partition")
    time: BodyTime | None = Field(None, description=f"the first n messages stored at or after this time: {TIME_FORMS}")


@router.post("/v1/console/page", dependencies=[Depends(require("read"))])
async def console_page(request: Request, topic: Annotated[str, Query(pattern=TOPIC_PATTERN)],
                       body: PageIn) -> dict[str, Any]:
    """A page of messages over the partitions, oldest first by store time (then partition, offset), read and merged
    on the server (api/http/merged_pages.py). `bounds` is every paged partition's start and end offset as read;
    `start` the first offset shown of each (its position when none is), `next` the offset after its last shown:
    send `{"after": next}` for the next page, `{"before": start}` for the previous one."""
    _check_topic(topic)
    modes = [k for k in ("after", "before", "offset", "time") if getattr(body, k) is not None]
    if len(modes) > 1:
        raise client_error(modes[1], f"give one of after, before, offset and time, not {' and '.join(modes)}")
    if body.partitions is not None and (body.after is not None or body.before is not None):
        raise client_error("partitions", "the partitions of a next or previous page are its positions' keys")
    node = request.app.state.backend
    parts = getattr(node, "partitions", None)
    if parts is None:
        raise client_error("console", "this server has no broker node to describe", status=404)

    def page() -> dict[str, Any]:
        t = parts.topic(topic)
        positions = body.after if body.after is not None else body.before
        chosen = sorted(positions) if positions is not None else (
            sorted(set(body.partitions)) if body.partitions is not None else list(range(t.partitions)))
        field = "after" if body.after is not None else "before" if body.before is not None else "partitions"
        for p in chosen:
            if p >= t.partitions:
                raise client_error(field, f"topic {topic} has no partition {p} (it has {t.partitions})", status=404)
        handles = {p: parts.partition(t, p) for p in chosen}
        bounds = {p: parts.bounds(h) for p, h in handles.items()}

        def read(p: int, offset: int, count: int) -> tuple[list[Any], int]:
            return node.fetch(topic, p, offset, count)  # type: ignore[no-any-return]

        if body.before is not None:
            got = merged_pages.backward(read, body.before, bounds, body.n)
        elif body.after is not None:
            got = merged_pages.forward(read, body.after, bounds, body.n)
        elif body.offset is not None:
            got = merged_pages.forward(read, dict.fromkeys(chosen, body.offset), bounds, body.n)
        elif body.time is not None:
            at = {}
            for p in chosen:
                offset, _ = offset_for_time(parts, handles[p], body.time)
                at[p] = offset if offset >= 0 else bounds[p][1]
            got = merged_pages.forward(read, at, bounds, body.n)
        else:
            got = merged_pages.backward(read, {p: end for p, (_, end) in bounds.items()}, bounds, body.n)
        return {"messages": [message_out(m) for m in got.messages],
                "bounds": {p: {"start": s, "end": e} for p, (s, e) in bounds.items()},
                "start": got.start, "next": got.next}

    return await _node_call_fn(page)


@router.get("/console/{name}.js", include_in_schema=False)
async def console_script(name: str) -> Response:
    if name not in SCRIPTS:
        raise client_error("name", f"{name}.js: no such console script", status=404)
    return Response(SCRIPTS[name], media_type="text/javascript")


@router.get("/v1/console/session")
async def console_session(request: Request) -> dict[str, Any]:
    """The scopes the caller's token grants (every scope when no tokens are configured); 401 for no or an
    unknown token when tokens are configured."""
    caller = principal(request)
    return {"scopes": sorted(s for s in SCOPES if caller.allows(s))}


def _own_throughput(request: Request) -> dict[str, Any]:
    history = getattr(request.app.state, "throughput", None)
    if history is None:
        raise client_error("console", "this server keeps no throughput history (no broker node)", status=404)
    return dict(history.history(), node_id=getattr(request.app.state.backend, "node_id", None))


async def _peer_throughput(request: Request, node_id: int, base: str) -> dict[str, Any]:
    headers = {"authorization": request.headers["authorization"]} if "authorization" in request.headers else {}
    try:
        async with peer_client(PEER_TIMEOUT_S) as client:
            r = await client.get(base + "/v1/console/throughput", params={"scope": "node"}, headers=headers)
        if r.status_code == 200:
            return r.json()  # type: ignore[no-any-return]
        why = f"answered {r.status_code}"
    except httpx.HTTPError as exc:
        why = f"did not answer: {exc}"
    return {"node_id": node_id, "error": f"node {node_id} at {base} {why}"}


def _empty(slots: int) -> dict[str, Any]:
    return {"messages_per_s": [0.0] * slots, "bytes_per_s": [0.0] * slots, "messages": 0, "bytes": 0}


def _sum_into(into: dict[str, Any], series: dict[str, Any], shift: int) -> dict[str, Any]:
    """Add a node's `series` (buckets `shift` places later than `into`'s) and its counts to `into`."""
    for kind in ("messages_per_s", "bytes_per_s"):
        row = into[kind]
        for i, v in enumerate(series[kind]):
            if 0 <= i + shift < len(row):
                row[i + shift] += v
    into["messages"] += series["messages"]
    into["bytes"] += series["bytes"]
    return into


@router.get("/v1/console/throughput", dependencies=[Depends(require("read"))])
async def console_throughput(request: Request,
                             scope: Annotated[Literal["cluster", "node"], Query(
                                 description="cluster: every live node's history (asked of each); node: this "
                                             "node's only")] = "cluster") -> dict[str, Any]:
    """Messages/s and bytes/s appended over the last hour in buckets of `step_s` from `start_ms` (oldest first,
    the last one the current bucket): `topics` per topic summed over the nodes, `nodes` per node (`error` for a
    node that did not answer). Each node keeps its own history in memory since it started."""
    own = await run_in_threadpool(_own_throughput, request)
    own["topics"] = {t: s for t, s in own["topics"].items() if may(request, "describe", "topic", t)}  # ACL rules
    if scope == "node":
        return own
    node = request.app.state.backend
    alive = await run_in_threadpool(lambda: node.cluster.membership.alive()) if hasattr(node, "cluster") else {}
    peers = [(n.node_id, n.http.rstrip("/")) for n in alive.values() if n.node_id != own["node_id"] and n.http]
    answers = [own, *await asyncio.gather(*(_peer_throughput(request, i, b) for i, b in peers))]
    slots, step_ms = len(own["total"]["messages_per_s"]), own["step_s"] * 1000
    topics: dict[str, dict[str, Any]] = {}
    nodes = []
    for a in sorted(answers, key=lambda a: a["node_id"] if a["node_id"] is not None else -1):
        if "error" in a:
            nodes.append({"node_id": a["node_id"], "error": a["error"]})
            continue
        shift = (a["start_ms"] - own["start_ms"]) // step_ms  # the grids match; a clock apart moves by buckets
        nodes.append(_sum_into({"node_id": a["node_id"], **_empty(slots)}, a["total"], shift))
        for topic, series in a["topics"].items():
            _sum_into(topics.setdefault(topic, _empty(slots)), series, shift)
    return {"start_ms": own["start_ms"], "step_s": own["step_s"], "now_ms": own["now_ms"], "topics": topics,
            "nodes": nodes}
