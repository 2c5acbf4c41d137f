"""The HTTP routes of DESIGN.md section 2: topics, produce, fetch, lookup by key and by id, index files."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from api import node_settings
from api.backend import Backend, InMessage, OutMessage
from api.http.auth import check, check_message_id, may, require
from api.http.errors import TOO_DEEP, as_http, client_error
from api.http.message_json import Page, header_fields
from api.http.models import (
    CURSOR_PATTERN,
    MAX_HITS_PAGE,
    MAX_INT,
    MAX_PAGE,
    MAX_VALUE_BYTES,
    MSG_ID_PATTERN,
    TOPIC_PATTERN,
    DamageOut,
    ErrorOut,
    FetchOut,
    FieldError,
    HeaderOut,
    IndexFilesOut,
    IndexHitsOut,
    KeyHitsOut,
    LookupOut,
    MessageOut,
    ProduceIn,
    ProduceOut,
    ReassignIn,
    RebalanceIn,
    ScrubOut,
    Text,
    TopicIn,
    TopicOut,
    UnreadableOut,
    decode_value,
    encode_bytes,
)
from api.http.plain_errors import produce_error
from api.http.produce_json import produce_messages, produced_answer
from api.http.store_time import StoreTime, iso
from broker.partitions.kafka_clients import committed_reads
from broker.partitions.key_text import asked_text, key_from_base64
from broker.partitions.message_size import Limit, TopicLimits

T = TypeVar("T")

TIME_FORMS = ("milliseconds since the epoch, or ISO 8601 (2026-04-07T01:12:26Z; UTC when it has no zone; a date "
              "alone is its midnight UTC)")
#: the page's next offset as a response header, readable before the body (a client pipelines pages with it)
NEXT_OFFSET_HEADER = "X-Next-Offset"
TopicPath = Annotated[str, Path(pattern=TOPIC_PATTERN, description="topic name")]
ERRORS: dict[int | str, dict[str, Any]] = {
    **{s: {"model": ErrorOut} for s in (400, 401, 403, 404, 405, 409, 413, 421, 500, 503, 507)},
    502: {"model": DamageOut, "description": "damage in the store: the object key and the failed check"},
}
router = APIRouter(responses=ERRORS)


async def call(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking backend call off the event loop; client errors become 4xx JSON."""
    backend: Backend = request.app.state.backend
    return await off_loop(getattr(backend, fn.__name__), *args)


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run blocking work on a worker thread; client errors become 4xx JSON."""
    try:
        return await run_in_threadpool(fn, *args)
    except Exception as exc:
        http = as_http(exc)
        if http is None:
            raise
        raise http from exc


def message_out(m: OutMessage) -> MessageOut:
    value, encoding = encode_bytes(m.value)
    key, key_encoding = encode_bytes(m.key)
    headers, header_list = header_fields(m.headers)
    return MessageOut(topic=m.topic, partition=m.partition, offset=m.offset, msg_id=m.msg_id, key=key,
                      key_encoding=key_encoding, headers=headers,
                      header_list=[HeaderOut(**h) for h in header_list] if header_list is not None else None,
                      value=value, encoding=encoding, timestamp=m.timestamp)


@router.post("/v1/topics", status_code=201, response_model=TopicOut, dependencies=[Depends(require("admin"))])
async def create_topic(body: TopicIn, request: Request) -> Any:
    configs = body.configs.as_dict() if body.configs is not None else None
    partitions = body.partitions
    if partitions is None:  # the node setting default_partitions, as Kafka's CreateTopics without a count
        settings = getattr(request.app.state, "settings", None)
        partitions = int(node_settings.value(settings.node if settings is not None else {}, "default_partitions"))
    return await call(request, Backend.create_topic, body.name, partitions, configs)


@router.get("/v1/topics", response_model=list[TopicOut], dependencies=[Depends(require("read"))])
async def list_topics(request: Request) -> Any:
    return [t for t in await call(request, Backend.list_topics) if may(request, "describe", "topic", t["name"])]


def _inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its `$defs` substituted in place (an OpenAPI request body schema)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return inline(schema)  # type: ignore[no-any-return]


def is_json(content_type: str | None) -> bool:
    """A JSON media type (application/json, application/*+json), as FastAPI requires for a JSON body."""
    media = (content_type or "").split(";")[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _produce_body_slow(raw: bytes) -> ProduceIn:
    """A body pydantic's JSON parser refused (it refuses lone surrogates in escapes, which the json module
    reads): parsed again the way FastAPI does, so such text is refused naming its field, and a body that is not
    JSON is refused in the words FastAPI's routes use (the json module's reason, told by line and column)."""
    try:
        data = json.loads(raw)
    except RecursionError:  # past pydantic's depth limit too: refused as FastAPI's parsing refuses it
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": TOO_DEEP,
                                       "input": None}]) from None
    except json.JSONDecodeError as exc:  # as FastAPI reports it for the other routes (fastapi/routing.py)
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": exc.msg}}], body=exc.doc) from None
    except UnicodeDecodeError:  # as api/http/errors.py tells it for the other routes
        raise client_error("body", "is not valid JSON: it is not UTF-8 text") from None
    try:
        return ProduceIn.model_validate(data)
    except ValidationError as exc:
        raise _produce_refused(exc) from None


def _produce_refused(exc: ValidationError) -> HTTPException:
    """The 400 of a produce body ProduceIn refused, naming the field at fault (api/http/plain_errors.py)."""
    message, field = produce_error(exc.errors(include_url=False))
    return HTTPException(400, detail={"error": message, "field": field})


#: the produce route's path (api/http/produce_lane.py answers its plain requests)
PRODUCE_PATH = "/v1/topics/{topic}/messages"


@router.post(PRODUCE_PATH, response_model=ProduceOut, dependencies=[Depends(require("produce"))],
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": _inline_schema(ProduceIn)}}}})
async def produce(topic: TopicPath, request: Request) -> Response:
    # a plain body is read by orjson (api/http/produce_json.py); any other is parsed and validated in one pass
    # by pydantic's JSON parser, which names the field at fault (FastAPI's own body handling parses with the
    # json module, then validates the Python objects: most of a large produce request's cost)
    raw = await request.body()
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    if not is_json(request.headers.get("content-type")):
        raise RequestValidationError([{"type": "model_attributes_type", "loc": ("body",), "input": None,
                                       "msg": "Input should be a valid dictionary or object to extract fields from"}])
    fast = produce_messages(raw)
    produced = await call(request, Backend.produce, topic,
                          fast if fast is not None else _produce_messages(raw, lambda: _topic_limit(request, topic)))
    # the ProduceOut document written directly (the route still declares ProduceOut for the OpenAPI schema):
    # a pydantic model per message, validated again as the response model, cost more than the append
    return Response(produced_answer(produced), media_type="application/json")


def _topic_limit(request: Request, topic: str) -> Limit | None:
    """The topic's max.message.bytes as the node's producer holds values to it (broker/partitions/message_size.py),
    None when the backend does not say (a refusal then names HTTP's own limit only)."""
    limits = getattr(getattr(request.app.state.backend, "producer", None), "limits", None)
    try:
        return limits.of(topic) if isinstance(limits, TopicLimits) else None
    except Exception:  # noqa: BLE001 - only a refusal's wording depends on it
        return None


def _over_http_limit(i: int, size: int, limit: Limit | None) -> HTTPException:
    """The 413 of a value over HTTP's own limit a value (MAX_VALUE_BYTES), saying that it is HTTP's and, when the
    topic's own max.message.bytes would take the value, that too: a Kafka producer can send it."""
    said = f"is {size} bytes, over HTTP's own limit of {MAX_VALUE_BYTES} bytes (1 MiB) a value"
    if limit is not None and limit.source == "topic" and size <= limit.bytes:
        said += (f", whatever the topic allows (its max.message.bytes of {limit.bytes} holds for Kafka producers: "
                 "send such a value with one)")
    return client_error(f"messages.{i}.value", said, status=413)


def _produce_messages(raw: bytes, topic_limit: Callable[[], Limit | None] = lambda: None) -> list[InMessage]:
    """The messages of a produce body validated by pydantic (a body `produce_messages` leaves to it);
    `topic_limit` is asked only for the refusal of a value over HTTP's own limit."""
    try:
        body = ProduceIn.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if not errors or errors[0]["type"] != "json_invalid":
            raise _produce_refused(exc) from None
        body = _produce_body_slow(raw)
    messages = []
    for i, m in enumerate(body.messages):
        try:
            value = decode_value(m.value, m.encoding, f"messages.{i}.value")
            key = decode_value(m.key, m.key_encoding, f"messages.{i}.key")
            headers = m.header_pairs(i)
        except FieldError as exc:
            raise client_error(exc.field, str(exc).removeprefix(exc.field + " ")) from exc
        if value is not None and len(value) > MAX_VALUE_BYTES:
            raise _over_http_limit(i, len(value), topic_limit())
        messages.append(InMessage(value=value, key=key, headers=headers, partition=m.partition))
    return messages


@router.get("/v1/topics/{topic}/partitions/{partition}/messages", response_model=FetchOut,
            dependencies=[Depends(require("read"))],
            responses={200: {"headers": {NEXT_OFFSET_HEADER: {
                "description": "the body's next_offset, to ask for the next page before parsing this one",
                "schema": {"type": "integer"}}}}})
async def fetch(request: Request, topic: TopicPath, partition: Annotated[int, Path(ge=0)],
                offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
                max: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
                isolation: Annotated[Literal["read_uncommitted", "read_committed"], Query(
                    description="read_committed: stop at the first open Kafka transaction and leave out aborted "
                                "ones' records")] = "read_uncommitted") -> Response:
    """A page of whole messages from `offset`. The body's `next_offset` is also in the `X-Next-Offset` header, which a
    client reads before the body: it can ask for the next page while it parses this one."""
    backend: Backend = request.app.state.backend

    def page() -> tuple[memoryview, int]:
        # read and the FetchOut document rendered from the stored batches (api/http/message_json.py) in one
        # worker call
        built = Page()
        if isolation == "read_committed":
            served, next_offset = committed_reads.fetch_rendered(request.app.state.backend.partitions, topic,
                                                                 partition, offset, max, built.renderer)
        else:
            served, next_offset = backend.fetch_rendered(topic, partition, offset, max, built.renderer)
        return memoryview(built.body(served, next_offset)), next_offset

    body, next_offset = await off_loop(page)
    return Response(body, media_type="application/json", headers={NEXT_OFFSET_HEADER: str(next_offset)})


# the query parameters of a key lookup (/v1/messages, /v1/index/hits)
LookupTopic = Annotated[str, Query(pattern=TOPIC_PATTERN)]
LookupKey = Annotated[Text, Query(min_length=1)]
LookupBegin = Annotated[StoreTime, Query(description=f"store time from: {TIME_FORMS}")]
LookupEnd = Annotated[StoreTime | None, Query(description=f"store time to: {TIME_FORMS}")]
LookupCursor = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="next_cursor of the previous page")]
KeyEncoding = Annotated[Literal["utf-8", "base64"], Query(
    description="how `key` is given: its text, or the base64 of its bytes (a key that is not UTF-8: a serialised "
                "long, a UUID's bytes)")]


@router.get("/v1/messages", response_model=LookupOut, dependencies=[Depends(require("read"))])
async def find_by_key(request: Request, topic: LookupTopic, key: LookupKey, begin: LookupBegin = 0,
                      end: LookupEnd = None, max: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 64,
                      cursor: LookupCursor = None, key_encoding: KeyEncoding = "utf-8") -> LookupOut:
    key = _lookup_key(key, key_encoding, begin, end)
    page = await call(request, Backend.find_by_key, topic, key, begin, end, max, cursor)
    messages, next_cursor = page
    unreadable = list(getattr(page, "unreadable", ()))  # broker.partitions.key_lookup.LookupPage
    for u in unreadable:
        request.app.state.metrics.corrupt_read(u.component, u.object, u.check, u.error)
    return LookupOut(messages=[message_out(m) for m in messages], next_cursor=next_cursor,
                     unreadable=[UnreadableOut(component=u.component, object=u.object, check=u.check, error=u.error,
                                               partition=u.partition, offset=u.offset) for u in unreadable])


@router.get("/v1/index/hits", response_model=KeyHitsOut, dependencies=[Depends(require("read"))])
async def key_hits(request: Request, topic: LookupTopic, key: LookupKey, begin: LookupBegin = 0,
                   end: LookupEnd = None, max: Annotated[int, Query(ge=1, le=MAX_HITS_PAGE)] = 1000,
                   cursor: LookupCursor = None, key_encoding: KeyEncoding = "utf-8") -> KeyHitsOut:
    """Where the cluster-wide index has `key`: [partition, offset] of each candidate, as /v1/messages pages them,
    without reading the records (so without checking them: a reader that reads the records itself, as the Spark
    source does, checks their keys and reads each record's block once, not twice)."""
    key = _lookup_key(key, key_encoding, begin, end)
    hits, next_cursor, unreadable = await call(request, Backend.key_hits, topic, key, begin, end, max, cursor)
    for u in unreadable:
        request.app.state.metrics.corrupt_read(u.component, u.object, u.check, u.error)
    return KeyHitsOut(hits=[[p, o] for p, o in hits], next_cursor=next_cursor,
                      unreadable=[UnreadableOut(component=u.component, object=u.object, check=u.check, error=u.error,
                                                partition=u.partition, offset=u.offset) for u in unreadable])


def _lookup_key(key: str, key_encoding: str, begin: int, end: int | None) -> str:
    """The indexed text a lookup asks for; a 400 naming the field for a bad key or time range."""
    if end is not None and begin > end:
        raise client_error("begin", f"({iso(begin)}) is after end ({iso(end)})")
    if key_encoding == "base64":
        try:
            return key_from_base64(key)
        except ValueError as exc:
            raise client_error("key", f"{str(exc)} (key_encoding is base64)") from None
    return asked_text(key)  # the indexed text of a text key (itself, unless it starts with U+FDD0)


MsgIdPath = Annotated[str, Path(pattern=MSG_ID_PATTERN,
                                description="32 hex characters: topic id (4 bytes), partition (4), offset (8)")]


@router.get("/v1/messages/{msg_id}", response_model=MessageOut, dependencies=[Depends(require("read"))])
async def get_by_id(request: Request, msg_id: MsgIdPath) -> MessageOut:
    await check_message_id(request, msg_id)  # ACL rules: a 403 before the read
    m = await call(request, Backend.get_by_id, msg_id)
    if m is None:
        raise client_error("msg_id", f"{msg_id}: no such message", status=404)
    check(request, "read", "topic", m.topic)  # a 403 that tells nothing of the message
    return message_out(m)


@router.get("/v1/index/files", response_model=IndexFilesOut, dependencies=[Depends(require("read"))])
async def index_files(request: Request) -> IndexFilesOut:
    return IndexFilesOut(files=await call(request, Backend.index_files))


# -- the cluster -----------------------------------------------------------------------------------
@router.get("/v1/cluster/nodes", dependencies=[Depends(require("read"))])
async def cluster_nodes(request: Request) -> Any:
    """Every node with its state (alive, expired, shut_down), lease, addresses and the partitions it leads (of
    the topics the caller may describe)."""
    nodes = await call(request, Backend.cluster_nodes)
    for n in nodes:  # "topic-partition" names: a topic the ACL rules hide is not named
        n["partitions"] = [p for p in n.get("partitions", []) if may(request, "describe", "topic", p.rsplit("-", 1)[0])]
    return {"nodes": nodes}


@router.get("/v1/cluster/failovers", dependencies=[Depends(require("read"))])
async def failovers(request: Request) -> Any:
    """What each failover did: the node fenced, by whom, partitions taken (of the topics the caller may describe),
    WAL records replayed (a local WAL replays none: records it acknowledged after the committed ends listed are
    lost)."""
    reports = await call(request, Backend.failovers)
    for f in reports:  # "topic-partition" names: a topic the ACL rules hide is not named
        f["partitions"] = [p for p in f.get("partitions", []) if may(request, "describe", "topic", p.rsplit("-", 1)[0])]
        if "committed_ends" in f:  # keyed by the same names
            f["committed_ends"] = {p: e for p, e in f["committed_ends"].items() if p in f["partitions"]}
        if isinstance(f.get("redispatched_from"), list):  # [topic, partition, offset]
            f["redispatched_from"] = [r for r in f["redispatched_from"] if may(request, "describe", "topic", r[0])]
        if isinstance(f.get("index_rescue"), dict) and "ranges" in f["index_rescue"]:  # [topic, partition, ...]
            f["index_rescue"]["ranges"] = [r for r in f["index_rescue"]["ranges"]
                                           if may(request, "describe", "topic", r[0])]
    return {"failovers": reports}


@router.post("/v1/admin/reassignments", dependencies=[Depends(require("admin"))])
async def reassign(body: ReassignIn, request: Request) -> Any:
    """Move a partition's leadership to another live node; answers once the target serves it."""
    return await call(request, Backend.reassign, body.topic, body.partition, body.to)


@router.post("/v1/admin/rebalance", dependencies=[Depends(require("admin"))])
async def rebalance(body: RebalanceIn, request: Request) -> Any:
    """The moves that even out the live nodes' measured load (by="load", the balancer's plan) or their share of
    the partitions (by="count"); run them with execute=true."""
    return await call(request, Backend.rebalance, body.execute, body.by)


@router.get("/v1/cluster/moves", dependencies=[Depends(require("read"))])
async def cluster_moves(request: Request) -> Any:
    """Recorded partition moves of the topics the caller may describe, newest first: the balancer's decisions with
    their reason and the loads they saw, rebalances and reassignments."""
    moves = await call(request, Backend.moves)
    return {"moves": [m for m in moves if may(request, "describe", "topic", m.get("topic", ""))]}  # ACL rules


@router.get("/v1/internal/index/query", response_model=IndexHitsOut, dependencies=[Depends(require("read"))])
async def local_index_query(request: Request, topic: Annotated[str, Query(pattern=TOPIC_PATTERN)],
                            key: Annotated[Text, Query(min_length=1)],
                            begin: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
                            end: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
                            max: Annotated[int, Query(ge=1, le=100_000)] = 64) -> IndexHitsOut:
    """This node's own index hits (another node's cluster-wide key lookup asks every live node)."""
    if end is not None and begin > end:
        raise client_error("begin", f"({begin}) is after end ({end})")
    hits = await call(request, Backend.local_index_query, topic, key, max, begin, end)
    return IndexHitsOut(hits=[[h.queue_id, h.offset, h.size, h.store_time_ms] for h in hits])


@router.post("/v1/admin/scrub", response_model=ScrubOut, dependencies=[Depends(require("admin"))])
async def scrub(request: Request) -> ScrubOut:
    """Read every committed broker object and every uploaded index file and verify every checksum (ranged
    reads, bounded memory); the answer lists the damaged ones with their streams, partitions and offsets."""
    from jobs.scrub import scrub_node

    backend = request.app.state.backend
    report = await run_in_threadpool(scrub_node, backend)
    for d in report.damaged:
        request.app.state.metrics.corrupt_read(d.component, d.object, d.check, d.error)
    return ScrubOut(**report.as_dict())


# -- compaction (broker/compaction): admin --------------------------------------------------------
@router.post("/v1/admin/compaction", dependencies=[Depends(require("admin"))])
async def run_compaction(request: Request) -> dict[str, Any]:
    """Run one compaction cycle now; what it did and the current object counts."""
    compact = getattr(request.app.state.backend, "compact", None)
    if compact is None:
        raise client_error("compaction", "this server has no broker to compact", status=404)
    return await run_in_threadpool(compact)


@router.get("/v1/admin/compaction", dependencies=[Depends(require("admin"))])
async def compaction_totals(request: Request) -> dict[str, Any]:
    """Compaction totals since the node opened and the current object counts."""
    compactor = getattr(request.app.state.backend, "compactor", None)
    if compactor is None:
        raise client_error("compaction", "this server has no broker to compact", status=404)
    return {**compactor.totals.snapshot(), **compactor.object_counts()}
