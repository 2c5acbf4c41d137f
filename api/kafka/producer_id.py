"""InitProducerId: for idempotent producers here (sequences are checked in
broker/partitions/kafka_clients/client_batches.py); for transactional ones by the
transaction coordinator (kafka_clients/transactions.py)."""

from __future__ import annotations

from typing import Any

from api.kafka import errors, transactions
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.partitions.kafka_clients import producer_ids


async def init_producer_id(ctx: Context, req: Any, version: int) -> Any:
    """A new producer id, epoch 0, for an idempotent producer (no transactional id); a transactional id's
    producer id with its epoch bumped otherwise."""
    if req.transactional_id is not None:
        return await transactions.init_transactional(ctx, req, version)
    pid = await ctx.run(producer_ids.allocate, ctx.node.meta, ctx.node_id)
    return build(APIS[22].response, version, throttle_time_ms=0, error_code=errors.NONE, producer_id=pid,
                 producer_epoch=0)
