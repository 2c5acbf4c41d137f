"""ApiVersions, Metadata and FindCoordinator."""

from __future__ import annotations

from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.partitions.topic_errors import TopicNotFound

GROUP, TRANSACTION = 0, 1  # FindCoordinator's key types


def api_versions_body(version: int, error: int = errors.NONE) -> dict[str, Any]:
    return dict(error_code=error, throttle_time_ms=0,
                api_keys=[dict(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
                          for a in sorted(APIS.values(), key=lambda a: a.key)])


async def api_versions(ctx: Context, req: Any, version: int) -> Any:
    return build(APIS[18].response, version, **api_versions_body(version))


def _topic_meta(ctx: Context, name: str, brokers: dict[int, tuple[str, int]]) -> dict[str, Any]:
    parts = ctx.node.partitions
    try:
        info = parts.topic(name)
    except TopicNotFound:
        return dict(error_code=errors.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False, partitions=[])
    except Exception as exc:  # noqa: BLE001 - an invalid name, answered as Kafka does
        return dict(error_code=errors.code_for(exc) if errors.code_for(exc) != -1 else errors.INVALID_TOPIC_EXCEPTION,
                    name=name, is_internal=False, partitions=[])
    out = []
    for i in range(info.partitions):
        p = parts.get(info.name, i)
        leader = ctx.node_id if p.owned else None
        if leader is None:
            where = parts.leader_elsewhere(p)
            leader = where[0] if where is not None else None
        if leader is None or leader not in brokers:
            out.append(dict(error_code=errors.LEADER_NOT_AVAILABLE, partition_index=i, leader_id=-1,
                            leader_epoch=-1, replica_nodes=[], isr_nodes=[], offline_replicas=[]))
        else:
            out.append(dict(error_code=errors.NONE, partition_index=i, leader_id=leader,
                            leader_epoch=max(p.epoch, 0) if p.owned else -1, replica_nodes=[leader],
                            isr_nodes=[leader], offline_replicas=[]))
    return dict(error_code=errors.NONE, name=info.name, is_internal=False, partitions=out)


async def metadata(ctx: Context, req: Any, version: int) -> Any:
    def answer() -> dict[str, Any]:
        brokers = ctx.brokers()
        if req.topics is None or (version == 0 and not req.topics):
            names = [t.name for t in ctx.node.partitions.list_topics()]
        else:
            names = [t.name for t in req.topics]
        return dict(throttle_time_ms=0, cluster_id="mqindex", controller_id=min(brokers),
                    brokers=[dict(node_id=n, host=h, port=p, rack=None) for n, (h, p) in sorted(brokers.items())],
                    topics=[_topic_meta(ctx, n, brokers) for n in names])

    return build(APIS[3].response, version, **await ctx.run(answer))


async def find_coordinator(ctx: Context, req: Any, version: int) -> Any:
    resp = APIS[10].response
    if req.key_type not in (GROUP, TRANSACTION):  # a transactional id is placed as a group id is
        return build(resp, version, throttle_time_ms=0, error_code=errors.INVALID_REQUEST,
                     error_message=f"unknown coordinator key type {req.key_type}", node_id=-1, host="", port=-1)
    brokers = await ctx.run(ctx.brokers)
    node = ctx.coordinator_for(req.key)
    host, port = brokers[node]
    return build(resp, version, throttle_time_ms=0, error_code=errors.NONE, error_message=None, node_id=node,
                 host=host, port=port)
