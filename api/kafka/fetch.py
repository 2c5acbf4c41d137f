"""Fetch: stored batches served as stored, with long polling (max wait, min bytes)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.partitions.client_reads import stored_batches

POLL_S = 0.01  # how often a waiting fetch looks for new records


async def fetch(ctx: Context, req: Any, version: int) -> Any:
    parts = ctx.node.partitions
    deadline = time.monotonic() + max(req.max_wait_ms, 0) / 1000
    max_bytes = req.max_bytes if version >= 3 else 1 << 31

    def read() -> tuple[list[dict[str, Any]], int, bool]:
        topics = []
        total = 0
        failed = False
        for t in req.topics:
            out = []
            for fp in t.partitions:
                d: dict[str, Any] = dict(partition_index=fp.partition, error_code=errors.NONE, high_watermark=-1,
                                         last_stable_offset=-1, log_start_offset=-1, aborted_transactions=[],
                                         preferred_read_replica=-1, records=b"")
                try:
                    info = parts.topic(t.topic)
                    p = parts.partition(info, fp.partition)
                    if not p.owned:
                        raise parts.not_served(p)
                    start, end = parts.bounds(p)
                    d.update(high_watermark=end, last_stable_offset=end, log_start_offset=start)
                    if not start <= fp.fetch_offset <= end:
                        d["error_code"] = errors.OFFSET_OUT_OF_RANGE
                        failed = True
                    elif fp.fetch_offset < end and total < max_bytes:
                        data = stored_batches(parts, p, fp.fetch_offset, min(fp.partition_max_bytes,
                                                                             max(max_bytes - total, 1)))
                        d["records"] = data
                        total += len(data)
                except Exception as exc:  # noqa: BLE001 - answered per partition with Kafka's code
                    d["error_code"] = errors.code_for(exc)
                    failed = True
                out.append(d)
            topics.append(dict(topic=t.topic, partitions=out))
        return topics, total, failed

    while True:
        topics, total, failed = await ctx.run(read)
        if failed or total >= max(req.min_bytes, 1) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    return build(APIS[1].response, version, throttle_time_ms=0, error_code=errors.NONE, session_id=0,
                 responses=topics)
