"""InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn,
translated to the transaction coordinator (broker/partitions/kafka_clients/transactions.py), and the loop that completes
prepared transactions and aborts timed-out ones.

A transactional id is coordinated by the node `Context.coordinator_for` names (as a group is); the others answer
NOT_COORDINATOR so the client looks it up again. TxnOffsetCommit goes to the group's coordinator, as in Kafka.
Answers for a fenced producer are PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH to the request versions that
predate it (Kafka's mapping).

Each request makes one trip to a worker thread: the coordinator check (the live nodes may be read from the
metadata), the partitions' check and the coordinator's call run there one after the other. Two or three trips
a request (one per blocking call) cost a loop wake-up and a turn at the GIL each, on every transaction's
critical path (AddPartitionsToTxn and EndTxn), and showed as a twentieth of the listener's CPU.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.cluster.txn_markers import TxnMarkers
from broker.errors import MetadataUnavailable
from broker.partitions.kafka_clients import transactions
from broker.partitions.topics import is_topic_name

log = logging.getLogger("mqindex.kafka.transactions")

TICK_S = 0.5  # how often timed-out and prepared transactions are looked for
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}  # the first version of each API that knows PRODUCER_FENCED
NOT_COORDINATOR = "NOT_COORDINATOR"  # another node coordinates the id (answered before the coordinator is asked)


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
    if name == NOT_COORDINATOR:
        return errors.NOT_COORDINATOR
    c = errors.BY_NAME.get(name, errors.UNKNOWN_SERVER_ERROR)
    if c == errors.PRODUCER_FENCED and version < _FENCED_SINCE[api_key]:
        return errors.INVALID_PRODUCER_EPOCH
    return c


def _called(fn: Any, *args: Any) -> str:
    """The coordinator's answer; COORDINATOR_NOT_AVAILABLE (the client retries) when it could not finish now."""
    try:
        return str(fn(*args))
    except transactions.TxnError as exc:  # a marker could not be written now: the client retries
        log.warning("transaction request not completed", extra={"error": str(exc)})
        return transactions.NOT_AVAILABLE
    except MetadataUnavailable:  # answered COORDINATOR_NOT_AVAILABLE by the listener (server.py), no traceback
        raise
    except Exception:  # noqa: BLE001 - the metadata store refused: the client retries
        log.exception("transaction request failed")
        return transactions.NOT_AVAILABLE


async def _coordinated(ctx: Context, key: str, fn: Any, *args: Any) -> str:
    """NOT_COORDINATOR, or the coordinator's answer to fn(*args): one trip to a worker thread (module doc)."""
    def run() -> str:
        return NOT_COORDINATOR if ctx.coordinated_elsewhere(key) else _called(fn, *args)
    return await ctx.run(run)


async def init_transactional(ctx: Context, req: Any, version: int) -> Any:
    resp = APIS[22].response
    coord, tid = coordinator(ctx), req.transactional_id

    def run() -> tuple[str, int, int]:
        if ctx.coordinated_elsewhere(tid):
            return NOT_COORDINATOR, -1, -1
        try:
            return coord.init_producer_id(tid, req.transaction_timeout_ms)
        except MetadataUnavailable:  # answered COORDINATOR_NOT_AVAILABLE by the listener (server.py), no traceback
            raise
        except Exception:  # noqa: BLE001 - a marker or the metadata store refused: the client retries
            log.exception("InitProducerId failed")
            return transactions.NOT_AVAILABLE, -1, -1

    name, pid, epoch = await ctx.run(run)
    return build(resp, version, throttle_time_ms=0, error_code=code(name, 22, version), producer_id=pid,
                 producer_epoch=epoch)


async def add_partitions(ctx: Context, req: Any, version: int) -> Any:
    topics = req.v3_and_below_topics
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    coord, tid = coordinator(ctx), req.v3_and_below_transactional_id

    def run() -> tuple[str, set[tuple[str, int]]]:
        if ctx.coordinated_elsewhere(tid):
            return NOT_COORDINATOR, set()
        bad = _unknown_partitions(ctx, wanted)
        if bad:
            return "", bad
        return _called(coord.add_partitions, tid, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                       wanted), bad

    name, bad = await ctx.run(run)
    if bad:  # all or nothing, as Kafka: the unknown ones fail, the others are not added
        return build(APIS[24].response, version, throttle_time_ms=0, results_by_topic_v3_and_below=[
            dict(name=t.name, results_by_partition=[
                dict(partition_index=p, partition_error_code=errors.UNKNOWN_TOPIC_OR_PARTITION
                     if (t.name, p) in bad else errors.OPERATION_NOT_ATTEMPTED) for p in t.partitions])
            for t in topics])
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
        except MetadataUnavailable:  # not known to be unknown: answered COORDINATOR_NOT_AVAILABLE (server.py)
            raise
        except Exception:  # noqa: BLE001 - no such topic, or an invalid name
            bad.add((t, p))
    return bad


async def add_offsets(ctx: Context, req: Any, version: int) -> Any:
    if not req.group_id:
        c = errors.INVALID_GROUP_ID if not await ctx.not_coordinator(req.transactional_id) else errors.NOT_COORDINATOR
    else:
        c = code(await _coordinated(ctx, req.transactional_id, coordinator(ctx).add_offsets, req.transactional_id,
                                    req.producer_id, req.producer_epoch, req.group_id), 25, version)
    return build(APIS[25].response, version, throttle_time_ms=0, error_code=c)


async def txn_offset_commit(ctx: Context, req: Any, version: int) -> Any:
    invalid = {t.name for t in req.topics if not is_topic_name(t.name)}
    offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_metadata)
               for t in req.topics if t.name not in invalid for p in t.partitions}
    c = code(await _coordinated(ctx, req.group_id, coordinator(ctx).txn_offset_commit, req.transactional_id,
                                req.producer_id, req.producer_epoch, req.group_id, offsets), 28, version)
    return build(APIS[28].response, version, throttle_time_ms=0, topics=[
        dict(name=t.name, partitions=[dict(partition_index=p.partition_index,
                                           error_code=errors.INVALID_TOPIC_EXCEPTION if t.name in invalid else c)
                                      for p in t.partitions]) for t in req.topics])


async def end_txn(ctx: Context, req: Any, version: int) -> Any:
    c = code(await _coordinated(ctx, req.transactional_id, coordinator(ctx).end_txn, req.transactional_id,
                                req.producer_id, req.producer_epoch, bool(req.committed)), 26, version)
    return build(APIS[26].response, version, throttle_time_ms=0, error_code=c, producer_id=-1, producer_epoch=-1)


async def expiry_loop(ctx: Context) -> None:
    """Complete prepared transactions (a coordinator stopped in the middle of EndTxn) and abort the transactions
    older than their timeout, for the transactional ids this node coordinates."""
    while True:
        await asyncio.sleep(TICK_S)
        if getattr(ctx.node, "closing", False):  # a clean stop: the node's close stores what it holds
            continue
        try:
            await ctx.run(coordinator(ctx).tick, lambda tid: ctx.coordinator_for(tid) == ctx.node_id)
        except MetadataUnavailable:  # logged once when it stopped answering (broker/metadata/pg_link.py)
            pass
        except Exception:  # noqa: BLE001 - the next tick tries again
            log.exception("transaction expiry failed")
