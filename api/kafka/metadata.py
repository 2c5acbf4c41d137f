"""ApiVersions, Metadata and FindCoordinator.

Metadata naming a topic that does not exist creates it, as Kafka does with auto.create.topics.enable (its
default): when the request allows it (`allow_auto_topic_creation`, v4 and later; earlier versions always do),
the node setting `auto_create_topics` is on (default) and the caller may create topics (scopes and access
rules: authorization.may_create_topic). The topic gets `default_partitions` partitions and the server's default
configs, and is answered in the same response: its partitions LEADER_NOT_AVAILABLE until a node leads them
(the client asks again, as after Kafka's creation). Producers allow it by default (librdkafka, kafka-python,
aiokafka); librdkafka's consumers do not (`allow.auto.create.topics`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.errors import MetadataUnavailable
from broker.partitions.topic_errors import TopicExists, TopicNotFound

log = logging.getLogger("mqindex.kafka.metadata")

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
    except MetadataUnavailable:  # retriable: clients ask again (librdkafka, kafka-python, the Java client)
        return dict(error_code=errors.LEADER_NOT_AVAILABLE, name=name, is_internal=False, partitions=[])
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


def _create(ctx: Context, name: str, created: Callable[[str, int], None] | None) -> int:
    """Create `name` with the default partitions (module doc): its error code (NONE when created, or created
    meanwhile by another request)."""
    try:
        ctx.node.create_topic(name, ctx.default_partitions)
        code = errors.NONE
        log.info("topic created automatically (a Kafka client's metadata request named it)",
                 extra={"topic": name, "partitions": ctx.default_partitions})
    except TopicExists:
        return errors.NONE
    except Exception as exc:  # noqa: BLE001 - answered for that topic with Kafka's code
        code = errors.code_for(exc)
        log.warning("topic not created automatically", extra={"topic": name, "error": str(exc)})
    if created is not None:
        created(name, code)
    return code


def _auto_create(req: Any, version: int) -> bool:
    return version < 4 or bool(req.allow_auto_topic_creation)


async def metadata(ctx: Context, req: Any, version: int, may_create: Callable[[str], int | None] | None = None,
                   created: Callable[[str, int], None] | None = None) -> Any:
    """`may_create(name)`: None when the caller may create the topic, else the code to answer it with (no
    `may_create`: nothing is created); `created(name, code)` is told of each creation (module doc)."""
    def answer() -> dict[str, Any]:
        brokers = ctx.brokers()
        if req.topics is None or (version == 0 and not req.topics):
            try:
                names = [t.name for t in ctx.node.partitions.list_topics()]
            except MetadataUnavailable:  # the topics last read, each answered LEADER_NOT_AVAILABLE (retriable)
                names = sorted(ctx.node.partitions.registry.bodies())
        else:
            names = [t.name for t in req.topics]
        creates = may_create is not None and ctx.auto_create_topics and req.topics and _auto_create(req, version)
        topics = []
        for name in names:
            t = _topic_meta(ctx, name, brokers)
            if creates and name and t["error_code"] == errors.UNKNOWN_TOPIC_OR_PARTITION:
                code = may_create(name)  # type: ignore[misc]
                if code is None:
                    code = _create(ctx, name, created)
                    if code == errors.NONE:
                        t = _topic_meta(ctx, name, brokers)
                if code != errors.NONE:
                    t["error_code"] = code
            topics.append(t)
        return dict(throttle_time_ms=0, cluster_id="mqindex", controller_id=min(brokers),
                    brokers=[dict(node_id=n, host=h, port=p, rack=None) for n, (h, p) in sorted(brokers.items())],
                    topics=topics)

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
