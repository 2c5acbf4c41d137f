"""The HTTP routes of DESIGN.md section 2: topics, produce, fetch, lookup by key and by id, index files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.concurrency import run_in_threadpool

from api.backend import Backend, InMessage, OutMessage
from api.http.auth import require
from api.http.errors import as_http, client_error
from api.http.models import (
    CURSOR_PATTERN,
    MAX_PAGE,
    MAX_VALUE_BYTES,
    MSG_ID_PATTERN,
    TOPIC_PATTERN,
    ErrorOut,
    FetchOut,
    FieldError,
    IndexFilesOut,
    LookupOut,
    MessageOut,
    ProducedOut,
    ProduceIn,
    ProduceOut,
    TopicIn,
    TopicOut,
    decode_value,
    encode_bytes,
)

T = TypeVar("T")
TopicPath = Annotated[str, Path(pattern=TOPIC_PATTERN, description="topic name")]
ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": ErrorOut} for s in (400, 401, 403, 404, 409, 413, 503, 507)}
router = APIRouter(responses=ERRORS)


async def call(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking backend call off the event loop; client errors become 4xx JSON."""
    backend: Backend = request.app.state.backend
    try:
        return await run_in_threadpool(getattr(backend, fn.__name__), *args)
    except Exception as exc:
        http = as_http(exc)
        if http is None:
            raise
        raise http from exc


def message_out(m: OutMessage) -> MessageOut:
    value, encoding = encode_bytes(m.value)
    key = m.key.decode(errors="replace") if m.key is not None else None
    headers = {k: v.decode(errors="replace") for k, v in m.headers}
    return MessageOut(topic=m.topic, partition=m.partition, offset=m.offset, msg_id=m.msg_id, key=key,
                      headers=headers, value=value, encoding=encoding, timestamp=m.timestamp)


@router.post("/v1/topics", status_code=201, response_model=TopicOut, dependencies=[Depends(require("admin"))])
async def create_topic(body: TopicIn, request: Request) -> Any:
    return await call(request, Backend.create_topic, body.name, body.partitions)


@router.get("/v1/topics", response_model=list[TopicOut], dependencies=[Depends(require("read"))])
async def list_topics(request: Request) -> Any:
    return await call(request, Backend.list_topics)


@router.post("/v1/topics/{topic}/messages", response_model=ProduceOut, dependencies=[Depends(require("produce"))])
async def produce(topic: TopicPath, body: ProduceIn, request: Request) -> ProduceOut:
    messages = []
    for i, m in enumerate(body.messages):
        try:
            value = decode_value(m.value, m.encoding, f"messages.{i}.value")
        except FieldError as exc:
            raise client_error(exc.field, str(exc).removeprefix(exc.field + " ")) from exc
        if value is not None and len(value) > MAX_VALUE_BYTES:
            raise client_error(f"messages.{i}.value", f"is {len(value)} bytes, over the limit of {MAX_VALUE_BYTES}",
                               status=413)
        messages.append(InMessage(value=value, key=m.key.encode() if m.key is not None else None,
                                  headers=[(k, v.encode()) for k, v in m.headers.items()], partition=m.partition))
    produced = await call(request, Backend.produce, topic, messages)
    return ProduceOut(results=[ProducedOut(partition=p.partition, offset=p.offset, msg_id=p.msg_id,
                                           timestamp=p.timestamp) for p in produced])


@router.get("/v1/topics/{topic}/partitions/{partition}/messages", response_model=FetchOut,
            dependencies=[Depends(require("read"))])
async def fetch(request: Request, topic: TopicPath, partition: Annotated[int, Path(ge=0)],
                offset: Annotated[int, Query(ge=0)] = 0,
                max: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100) -> FetchOut:
    messages, next_offset = await call(request, Backend.fetch, topic, partition, offset, max)
    return FetchOut(messages=[message_out(m) for m in messages], next_offset=next_offset)


@router.get("/v1/messages", response_model=LookupOut, dependencies=[Depends(require("read"))])
async def find_by_key(request: Request, topic: Annotated[str, Query(pattern=TOPIC_PATTERN)],
                      key: Annotated[str, Query(min_length=1)],
                      begin: Annotated[int, Query(ge=0, description="store time from, ms")] = 0,
                      end: Annotated[int | None, Query(ge=0, description="store time to, ms")] = None,
                      max: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 64,
                      cursor: Annotated[str | None, Query(pattern=CURSOR_PATTERN,
                                                          description="next_cursor of the previous page")] = None
                      ) -> LookupOut:
    if end is not None and begin > end:
        raise client_error("begin", f"({begin}) is after end ({end})")
    messages, next_cursor = await call(request, Backend.find_by_key, topic, key, begin, end, max, cursor)
    return LookupOut(messages=[message_out(m) for m in messages], next_cursor=next_cursor)


MsgIdPath = Annotated[str, Path(pattern=MSG_ID_PATTERN,
                                description="32 hex characters: topic id (4 bytes), partition (4), offset (8)")]


@router.get("/v1/messages/{msg_id}", response_model=MessageOut, dependencies=[Depends(require("read"))])
async def get_by_id(request: Request, msg_id: MsgIdPath) -> MessageOut:
    m = await call(request, Backend.get_by_id, msg_id)
    if m is None:
        raise client_error("msg_id", f"{msg_id}: no such message", status=404)
    return message_out(m)


@router.get("/v1/index/files", response_model=IndexFilesOut, dependencies=[Depends(require("read"))])
async def index_files(request: Request) -> IndexFilesOut:
    return IndexFilesOut(files=await call(request, Backend.index_files))
