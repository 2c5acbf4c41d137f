"""Fetch: stored batches served as stored, with long polling (max wait, min bytes).

The partitions of one request that have records to read are read concurrently (each on a worker thread), so
their ranged GETs overlap instead of following each other, as many in request order as fit in `max_bytes`
with their `partition_max_bytes`; the others are read after them while the answer has room, so a fetch of
many partitions never reads far beyond its limit. The checks and bounds of every partition, and the read
when only one has records, take one worker call. The answer keeps Kafka's limits in request order: each
partition at most its `partition_max_bytes`, the whole at most `max_bytes` (cut at a batch boundary), except
that the first non-empty partition always carries at least one batch so a batch over the limits still makes
progress. What a cut leaves out is in the block cache for the next fetch.

read_committed (isolation_level 1) reads up to the partition's last stable offset (the first offset of its oldest
open transaction) and lists the aborted transactions in the range, which the client skips; read_uncommitted
reads to the high watermark. Both see the control batches (transaction markers), which clients skip.

The response is encoded on a worker thread too (`EncodedResponse`): an answer can be tens of MiB, and
encoding it on the event loop would stall every other connection for as long as the bytes are copied.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

from kafka.protocol.schemas.fields.codecs import EncodeBuffer

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.partitions.kafka_clients.client_reads import stored_batches

POLL_S = 0.01  # how often a waiting fetch looks for new records
READ_COMMITTED = 1  # isolation_level: up to the last stable offset, with the aborted transactions to skip
_BATCH_LENGTH = struct.Struct(">i")  # RecordBatch: base offset (8 bytes), then the length of the rest
_FRAME = struct.Struct(">i")  # a Kafka frame: the length of the message that follows


class EncodedResponse:
    """A response already encoded with its header and framed (the 4-byte length in front), as the listener's
    writer sends it (`server.framed`): `with_header` checks the correlation id it was encoded with, `framed` is
    the frame (a view of the encoding buffer: the answer's bytes are copied once, into it)."""

    __slots__ = ("correlation_id", "framed")

    def __init__(self, correlation_id: int, framed: memoryview) -> None:
        self.correlation_id = correlation_id
        self.framed = framed

    def with_header(self, correlation_id: int = 0, **_: Any) -> None:
        if correlation_id != self.correlation_id:
            raise ValueError(f"response encoded for correlation id {self.correlation_id}, not {correlation_id}")


def encode_response(resp: Any, version: int, correlation_id: int, size_hint: int) -> EncodedResponse:
    """`resp.encode(header=True)`, framed, into a buffer sized for the records (kafka-python's own thread-local
    buffer would grow to the largest answer on every worker thread and keep that memory)."""
    resp.with_header(correlation_id=correlation_id)
    flexible = bool(resp.flexible_version_q(version))
    out = EncodeBuffer(size_hint + 65536)
    out.pos = 4  # the frame's length, written once the size is known
    resp.encode_header_into(out, flexible=flexible)
    resp._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)(resp, out)
    _FRAME.pack_into(out.buf, 0, out.pos - 4)
    return EncodedResponse(correlation_id, memoryview(out.buf)[:out.pos])


def cut(data: bytes, limit: int) -> bytes:
    """The whole batches of `data` that fit in `limit` bytes."""
    pos = 0
    while pos + 12 <= len(data):
        end = pos + 12 + _BATCH_LENGTH.unpack_from(data, pos + 8)[0]
        if end > limit:
            break
        pos = end
    return data[:pos]


async def fetch(ctx: Context, req: Any, version: int, refused: frozenset[str] = frozenset()) -> Any:
    """The answer to `req`; the topics in `refused` (by the access control rules) are answered
    TOPIC_AUTHORIZATION_FAILED on each of their partitions, nothing of them read, and the others served."""
    parts = ctx.node.partitions
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    max_bytes = req.max_bytes if version >= 3 else 1 << 31

    committed = version >= 4 and req.isolation_level == READ_COMMITTED
    txns = ctx.node.client_batches.txns

    def records(d: dict[str, Any], p: Any, offset: int, limit: int) -> bool:
        """Fill d["records"]; False when the read failed (d carries Kafka's code)."""
        try:
            d["records"] = stored_batches(parts, p, offset, limit, d["last_stable_offset"] if committed else None)
        except Exception as exc:  # noqa: BLE001 - answered per partition with Kafka's code
            d["error_code"] = errors.code_for(exc)
            return False
        return True

    def plan() -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], Any, int, int]], bool]:
        """Every partition's answer without its records, the reads still to do, and whether one failed. With
        one partition to read it is read here: there is nothing to overlap it with."""
        answers: list[dict[str, Any]] = []
        reads: list[tuple[dict[str, Any], Any, int, int]] = []
        failed = False
        for t in req.topics:
            for fp in t.partitions:
                d: dict[str, Any] = dict(partition_index=fp.partition, error_code=errors.NONE, high_watermark=-1,
                                         last_stable_offset=-1, log_start_offset=-1, aborted_transactions=[],
                                         preferred_read_replica=-1, records=b"")
                answers.append(d)
                if t.topic in refused:
                    d["error_code"] = errors.TOPIC_AUTHORIZATION_FAILED
                    continue
                try:
                    info = parts.topic(t.topic)
                    p = parts.partition(info, fp.partition)
                    if not p.owned:
                        raise parts.not_served(p)
                    start, end = parts.bounds(p)
                    state = txns.of(p) if committed else txns.known(p)
                    lso = state.lso(end) if state is not None else end
                    d.update(high_watermark=end, last_stable_offset=lso, log_start_offset=start)
                    if committed and state is not None:
                        d["aborted_transactions"] = [dict(producer_id=pid, first_offset=first)
                                                     for pid, first in state.aborted_in(fp.fetch_offset, lso)]
                    if not start <= fp.fetch_offset <= end:
                        d["error_code"] = errors.OFFSET_OUT_OF_RANGE
                        failed = True
                    elif fp.fetch_offset < (lso if committed else end):
                        reads.append((d, p, fp.fetch_offset, max(min(fp.partition_max_bytes, max_bytes), 1)))
                except Exception as exc:  # noqa: BLE001 - answered per partition with Kafka's code
                    d["error_code"] = errors.code_for(exc)
                    failed = True
        if len(reads) == 1:
            failed |= not records(*reads.pop())
        return answers, reads, failed

    def rest(reads: list[tuple[dict[str, Any], Any, int, int]], total: int) -> bool:
        """The reads beyond the first wave, one after the other while the answer has room."""
        ok = True
        for d, p, offset, limit in reads:
            if total >= max_bytes:
                break
            ok &= records(d, p, offset, min(limit, max_bytes - total))
            total += len(d["records"])
        return ok

    async def read() -> tuple[list[dict[str, Any]], int, bool]:
        answers, reads, failed = await ctx.run(plan)
        if reads:  # several partitions: the reads that fit in max_bytes together overlap (and their GETs)
            wave, budget = 0, 0
            while wave < len(reads) and (wave == 0 or budget + reads[wave][3] <= max_bytes):
                budget += reads[wave][3]
                wave += 1
            for ok in await asyncio.gather(*(ctx.run(records, *r) for r in reads[:wave])):
                failed |= not ok
            if wave < len(reads):
                failed |= not await ctx.run(rest, reads[wave:], sum(len(d["records"]) for d in answers))
        topics: list[dict[str, Any]] = []
        total = 0
        it = iter(answers)
        for t in req.topics:
            out = []
            for _ in t.partitions:
                d = next(it)
                data = d["records"]
                if data and total:  # the first batches of the answer always go, the rest within max_bytes
                    data = cut(data, max_bytes - total) if total < max_bytes else b""
                    d["records"] = data
                total += len(data)
                out.append(d)
            topics.append(dict(topic=t.topic, partitions=out))
        return topics, total, failed

    while True:
        topics, total, failed = await read()
        if failed or total >= max(req.min_bytes, 1) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    resp = build(APIS[1].response, version, throttle_time_ms=0, error_code=errors.NONE, session_id=0,
                 responses=topics)
    return await ctx.run(encode_response, resp, version, req.header.correlation_id, total)
