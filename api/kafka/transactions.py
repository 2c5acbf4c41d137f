"""InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn,
translated to the transaction coordinator (broker/partitions/kafka_clients/transactions.py), and the loop that completes
prepared transactions and aborts timed-out ones.

A transactional id is coordinated by the node `Context.coordinator_for` names (as a group is); the others answer
NOT_COORDINATOR so the client looks it up again. TxnOffsetCommit goes to the group's coordinator, as in Kafka.
Answers for a fenced producer are PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH to the request versions that
predate it (Kafka's mapping).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.cluster.txn_markers import TxnMarkers
from broker.partitions.kafka_clients import transactions
from broker.partitions.topics import is_topic_name

log = logging.getLogger("mqindex.kafka.transactions")

TICK_S = 0.5  # how often timed-out and prepared transactions are looked for
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}  # the first version of each API that knows PRODUCER_FENCED


def coordinator(ctx: Context) -> transactions.TransactionCoordinator:
    """This node's transaction coordinator (one per node; its state is in the metadata)."""
    node = ctx.node
    coord = getattr(node, "_txn_coordinator", None)
    if coord is None:
        markers = TxnMarkers(node.partitions, node.client_batches, getattr(node.cluster, "peers", None))
        coord = transactions.TransactionCoordinator(node.meta, ctx.node_id, markers.write, node.clock)
        node._txn_coordinator = coord
    return coord


def code(name: str, api_key: int, version: int) -> int:
    c = errors.BY_NAME.get(name, errors.UNKNOWN_SERVER_ERROR)
    if c == errors.PRODUCER_FENCED and version < _FENCED_SINCE[api_key]:
        return errors.INVALID_PRODUCER_EPOCH
    return c


async def _call(ctx: Context, fn: Any, *args: Any) -> str:
    try:
        return str(await ctx.run(fn, *args))
    except transactions.TxnError as exc:  # a marker could not be written now: the client retries
        log.warning("transaction request not completed", extra={"error": str(exc)})
        return transactions.NOT_AVAILABLE
    except Exception:  # noqa: BLE001 - the metadata store refused: the client retries
        log.exception("transaction request failed")
        return transactions.NOT_AVAILABLE


async def init_transactional(ctx: Context, req: Any, version: int) -> Any:
    resp = APIS[22].response
    if await ctx.not_coordinator(req.transactional_id):
        return build(resp, version, throttle_time_ms=0, error_code=errors.NOT_COORDINATOR, producer_id=-1,
                     producer_epoch=-1)
    try:
        name, pid, epoch = await ctx.run(coordinator(ctx).init_producer_id, req.transactional_id,
                                         req.transaction_timeout_ms)
    except Exception:  # noqa: BLE001 - a marker or the metadata store refused: the client retries
        log.exception("InitProducerId failed")
        name, pid, epoch = transactions.NOT_AVAILABLE, -1, -1
    return build(resp, version, throttle_time_ms=0, error_code=code(name, 22, version), producer_id=pid,
                 producer_epoch=epoch)


async def add_partitions(ctx: Context, req: Any, version: int) -> Any:
    topics = req.v3_and_below_topics
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if await ctx.not_coordinator(req.v3_and_below_transactional_id):
        c = errors.NOT_COORDINATOR
    else:
        bad = await ctx.run(_unknown_partitions, ctx, wanted)
        if bad:  # all or nothing, as Kafka: the unknown ones fail, the others are not added
            return build(APIS[24].response, version, throttle_time_ms=0, results_by_topic_v3_and_below=[
                dict(name=t.name, results_by_partition=[
                    dict(partition_index=p, partition_error_code=errors.UNKNOWN_TOPIC_OR_PARTITION
                         if (t.name, p) in bad else errors.OPERATION_NOT_ATTEMPTED) for p in t.partitions])
                for t in topics])
        name = await _call(ctx, coordinator(ctx).add_partitions, req.v3_and_below_transactional_id,
                           req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, wanted)
        c = code(name, 24, version)
    return build(APIS[24].response, version, throttle_time_ms=0, results_by_topic_v3_and_below=[
        dict(name=t.name, results_by_partition=[dict(partition_index=p, partition_error_code=c)
                                                for p in t.partitions]) for t in topics])


def _unknown_partitions(ctx: Context, wanted: list[tuple[str, int]]) -> set[tuple[str, int]]:
    bad = set()
    for t, p in wanted:
        try:
            info = ctx.node.partitions.topic(t)
            if not 0 <= p < info.partitions:
                bad.add((t, p))
        except Exception:  # noqa: BLE001 - no such topic, or an invalid name
            bad.add((t, p))
    return bad


async def add_offsets(ctx: Context, req: Any, version: int) -> Any:
    if await ctx.not_coordinator(req.transactional_id):
        c = errors.NOT_COORDINATOR
    elif not req.group_id:
        c = errors.INVALID_GROUP_ID
    else:
        c = code(await _call(ctx, coordinator(ctx).add_offsets, req.transactional_id, req.producer_id,
                             req.producer_epoch, req.group_id), 25, version)
    return build(APIS[25].response, version, throttle_time_ms=0, error_code=c)


async def txn_offset_commit(ctx: Context, req: Any, version: int) -> Any:
    invalid = {t.name for t in req.topics if not is_topic_name(t.name)}
    if await ctx.not_coordinator(req.group_id):
        c = errors.NOT_COORDINATOR
    else:
        offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_metadata)
                   for t in req.topics if t.name not in invalid for p in t.partitions}
        c = code(await _call(ctx, coordinator(ctx).txn_offset_commit, req.transactional_id, req.producer_id,
                             req.producer_epoch, req.group_id, offsets), 28, version)
    return build(APIS[28].response, version, throttle_time_ms=0, topics=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index,
                                           error_code=errors.INVALID_TOPIC_EXCEPTION if t.name in invalid else c)
                                      for p in t.partitions]) for t in req.topics])


async def end_txn(ctx: Context, req: Any, version: int) -> Any:
    if await ctx.not_coordinator(req.transactional_id):
        c = errors.NOT_COORDINATOR
    else:
        c = code(await _call(ctx, coordinator(ctx).end_txn, req.transactional_id, req.producer_id,
                             req.producer_epoch, bool(req.committed)), 26, version)
    return build(APIS[26].response, version, throttle_time_ms=0, error_code=c, producer_id=-1, producer_epoch=-1)


async def expiry_loop(ctx: Context) -> None:
    """Complete prepared transactions (a coordinator stopped in the middle of EndTxn) and abort the transactions
    older than their timeout, for the transactional ids this node coordinates."""
    while True:
        await asyncio.sleep(TICK_S)
        try:
            await ctx.run(coordinator(ctx).tick, lambda tid: ctx.coordinator_for(tid) == ctx.node_id)
        except Exception:  # noqa: BLE001 - the metadata store is away: the next tick tries again
            log.exception("transaction expiry failed")
