"""ListOffsets (earliest, latest, by timestamp), OffsetCommit and OffsetFetch (offsets in the metadata KV)."""

from __future__ import annotations

from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.errors import MetadataUnavailable
from broker.partitions.kafka_clients import group_offsets, transactions
from broker.partitions.kafka_clients.client_reads import offset_for_time, offset_of_max_timestamp
from broker.partitions.topics import is_topic_name

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


async def list_offsets(ctx: Context, req: Any, version: int) -> Any:
    parts = ctx.node.partitions

    def answer() -> list[dict[str, Any]]:
        topics = []
        for t in req.topics:
            out = []
            for lp in t.partitions:
                d: dict[str, Any] = dict(partition_index=lp.partition_index, error_code=errors.NONE,
                                         timestamp=-1, offset=-1, leader_epoch=-1)
                try:
                    info = parts.topic(t.name)
                    p = parts.partition(info, lp.partition_index)
                    if not p.owned:
                        raise parts.not_served(p)
                    start, end = parts.bounds(p)
                    if lp.timestamp == LATEST:
                        committed = version >= 2 and req.isolation_level == 1
                        d["offset"] = ctx.node.client_batches.txns.of(p).lso(end) if committed else end
                    elif lp.timestamp == EARLIEST:
                        d["offset"] = start
                    elif lp.timestamp >= 0:
                        d["offset"], d["timestamp"] = offset_for_time(parts, p, lp.timestamp)
                    elif lp.timestamp == MAX_TIMESTAMP:  # KIP-734 (clients send it from v7)
                        d["offset"], d["timestamp"] = offset_of_max_timestamp(parts, p)
                    else:
                        d["error_code"] = errors.INVALID_REQUEST
                except Exception as exc:  # noqa: BLE001 - answered per partition with Kafka's code
                    d["error_code"] = errors.code_for(exc)
                out.append(d)
            topics.append(dict(name=t.name, partitions=out))
        return topics

    return build(APIS[2].response, version, throttle_time_ms=0, topics=await ctx.run(answer))


async def offset_commit(ctx: Context, req: Any, version: int) -> Any:
    if await ctx.not_coordinator(req.group_id):
        code = errors.NOT_COORDINATOR
    else:
        code = ctx.coordinator.check_commit(req.group_id, req.generation_id_or_member_epoch, req.member_id)
    # a name no topic can have (one with '/' would also reach into another group's keys) is refused, not stored
    invalid = {t.name for t in req.topics if not is_topic_name(t.name)}
    if code == errors.NONE:
        offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_metadata)
                   for t in req.topics if t.name not in invalid for p in t.partitions}
        try:
            if offsets:
                await ctx.run(group_offsets.commit, ctx.node.meta, req.group_id, offsets)
        except Exception:  # noqa: BLE001 - the metadata store refused: the client retries
            code = errors.COORDINATOR_NOT_AVAILABLE
    return build(APIS[8].response, version, throttle_time_ms=0, topics=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index,
                                           error_code=errors.INVALID_TOPIC_EXCEPTION if t.name in invalid else code)
                                      for p in t.partitions])
        for t in req.topics])


def _fetch_refused(req: Any, version: int, code: int) -> Any:
    # v2+ read the top-level code; v1 has none, so each partition asked for carries it (as Kafka answers)
    topics = [dict(name=t.name, partitions=[
        dict(partition_index=i, committed_offset=-1, committed_leader_epoch=-1, metadata="",
             error_code=code) for i in t.partition_indexes]) for t in req.topics or []]
    return build(APIS[9].response, version, throttle_time_ms=0, topics=topics, error_code=code)


async def offset_fetch(ctx: Context, req: Any, version: int) -> Any:
    if await ctx.not_coordinator(req.group_id):
        return _fetch_refused(req, version, errors.NOT_COORDINATOR)
    try:
        return await _offset_fetch(ctx, req, version)
    except MetadataUnavailable:  # the metadata database does not answer: the client asks again
        return _fetch_refused(req, version, errors.COORDINATOR_NOT_AVAILABLE)


async def _offset_fetch(ctx: Context, req: Any, version: int) -> Any:
    # v7+ require_stable (read_committed consumers): offsets a transaction has not completed yet are unstable.
    # Read before the committed offsets: a completion moves a transaction's offsets in one metadata write, so
    # read in this order an offset is either still pending or already committed; read the other way round, a
    # completion landing between the two reads answered neither (no offset and no error)
    unstable = (await ctx.run(transactions.pending_offsets, ctx.node.meta, req.group_id)
                if version >= 7 and getattr(req, "require_stable", False) else set())
    committed = await ctx.run(group_offsets.fetch, ctx.node.meta, req.group_id)
    if req.topics is None:
        wanted: dict[str, list[int]] = {}
        for t, p in sorted(committed):
            wanted.setdefault(t, []).append(p)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in req.topics}
    topics = []
    for name, indexes in wanted.items():
        out = []
        for i in indexes:
            off, meta = committed.get((name, i), (-1, ""))
            if (name, i) in unstable:
                off, meta = -1, ""
            out.append(dict(partition_index=i, committed_offset=off, committed_leader_epoch=-1, metadata=meta,
                            error_code=errors.UNSTABLE_OFFSET_COMMIT if (name, i) in unstable else errors.NONE))
        topics.append(dict(name=name, partitions=out))
    return build(APIS[9].response, version, throttle_time_ms=0, topics=topics, error_code=errors.NONE)
