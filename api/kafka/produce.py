"""Produce: each partition's batches stored as the client sent them, acknowledged after the WAL fsync.

Two steps, so that a connection's pipelined requests share the WAL's group commits: `append` queues the
batches on the partitions' streams (the listener runs it for one request after the other, in arrival order,
which keeps an idempotent producer's batches in sequence), and the awaitable it returns waits for the fsync and
gives the response (the listener lets several of those wait at once)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.errors import RecordFormatError
from broker.partitions.client_batches import BatchTooLarge, SequenceError

log = logging.getLogger("mqindex.kafka.produce")


Outcomes = dict[tuple[str, int], tuple[int, int, str | None]]  # (topic, partition) -> (code, base, message)


async def produce(ctx: Context, req: Any, version: int) -> Any | None:
    """The whole request: appended, then answered once durable (None for acks=0)."""
    return await (await append(ctx, req, version))


async def append(ctx: Context, req: Any, version: int) -> Awaitable[Any | None]:
    """Queue every partition's batches on the WAL; returns once they are queued (not yet durable). The result
    waits for the fsync and gives the response (None for acks=0)."""
    parts = ctx.node.partitions

    def queue() -> tuple[Outcomes, list[tuple[tuple[str, int], Callable[[], None]]]]:
        out: Outcomes = {}
        waits: list[tuple[tuple[str, int], Callable[[], None]]] = []
        for t in req.topic_data:
            for pd in t.partition_data:
                key = (t.name, pd.index)
                if req.acks not in (0, 1, -1):
                    out[key] = (errors.INVALID_REQUIRED_ACKS, -1, f"acks {req.acks}")
                    continue
                if req.transactional_id is not None:
                    out[key] = (errors.INVALID_REQUEST, -1, "transactions are not supported")
                    continue
                try:
                    ctx.node._check_usable()
                    info = parts.topic(t.name)
                    p = parts.partition(info, pd.index)
                    results, wait = ctx.node.client_batches.append(p, bytes(pd.records or b""))
                    waits.append((key, wait))
                    out[key] = (errors.NONE, results[0].base_offset, None)
                except SequenceError as exc:
                    out[key] = (errors.BY_NAME[exc.code], -1, str(exc))
                except BatchTooLarge as exc:
                    out[key] = (errors.MESSAGE_TOO_LARGE, -1, str(exc))
                except RecordFormatError as exc:  # bad CRC, sizes, lengths or record count: nothing stored
                    code = errors.code_for(exc) if "transactional" in str(exc) else errors.CORRUPT_MESSAGE
                    out[key] = (code, -1, str(exc))
                except Exception as exc:  # noqa: BLE001 - answered per partition with Kafka's code
                    code = errors.code_for(exc)
                    if code == errors.UNKNOWN_SERVER_ERROR:
                        log.warning("produce refused", extra={"topic": t.name, "partition": pd.index,
                                                              "error": str(exc)})
                    out[key] = (code, -1, str(exc))
        return out, waits

    def durable(out: Outcomes, waits: list[tuple[tuple[str, int], Callable[[], None]]]) -> Outcomes:
        for key, wait in waits:  # acknowledged once the WAL has fsynced every batch
            try:
                wait()
            except Exception as exc:  # noqa: BLE001
                log.error("produce not durable", extra={"topic": key[0], "partition": key[1], "error": str(exc)})
                out[key] = (errors.KAFKA_STORAGE_ERROR, -1, str(exc))
        return out

    queued, waits = await ctx.run(queue)

    async def answer() -> Any | None:
        done = await ctx.run(durable, queued, waits) if waits else queued
        return None if req.acks == 0 else _response(done, version)

    return answer()


def _response(done: Outcomes, version: int) -> Any:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), (code, base, message) in done.items():
        by_topic.setdefault(topic, []).append(dict(index=index, error_code=code, base_offset=base,
                                                   log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                                   error_message=message))
    return build(APIS[0].response, version, throttle_time_ms=0,
                 responses=[dict(name=t, partition_responses=ps) for t, ps in by_topic.items()])
