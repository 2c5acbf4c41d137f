"""InitProducerId for idempotent producers; sequences are checked in broker/partitions/client_batches.py."""

from __future__ import annotations

from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.partitions import producer_ids


async def init_producer_id(ctx: Context, req: Any, version: int) -> Any:
    """InitProducerId for idempotent producers (no transactional id): a new producer id, epoch 0."""
    if req.transactional_id is not None:  # transactions are not served: refused at once, as FindCoordinator does
        return build(APIS[22].response, version, throttle_time_ms=0, error_code=errors.TRANSACTIONS_UNSUPPORTED,
                     producer_id=-1, producer_epoch=-1)
    pid = await ctx.run(producer_ids.allocate, ctx.node.meta, ctx.node_id)
    return build(APIS[22].response, version, throttle_time_ms=0, error_code=errors.NONE, producer_id=pid,
                 producer_epoch=0)
