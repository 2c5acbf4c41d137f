"""CreateTopics, DeleteTopics and CreatePartitions.

DeleteTopics deletes each named topic through the node (any node accepts it; the leaders learn it from the
metadata): NONE when deleted, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, each topic
answered on its own.

CreatePartitions grows each named topic to the count asked (broker/cluster/cluster.py: Cluster.add_partitions;
the new partitions spread over the live nodes): INVALID_PARTITIONS for a count not above the current one (the
message says the current count), INVALID_REPLICA_ASSIGNMENT for manual assignments (the cluster places
partitions), INVALID_REQUEST for a topic named twice, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not
exist; with validate_only, checked and not done."""

from __future__ import annotations

from typing import Any

from api.kafka import errors
from api.kafka.configs import config_value, refusal_text
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.errors import InvalidField
from broker.partitions import topic_config
from broker.partitions.topics import check_growth, validate_topic_name


async def create_topics(ctx: Context, req: Any, version: int) -> Any:
    def create(t: Any) -> dict[str, Any]:
        n = ctx.default_partitions if t.num_partitions == -1 else t.num_partitions
        out: dict[str, Any] = dict(name=t.name, error_code=errors.NONE, error_message=None,
                                   topic_config_error_code=errors.NONE, num_partitions=n, replication_factor=1,
                                   configs=[])
        try:
            if t.assignments:
                raise InvalidField("assignments", "manual replica assignments are not supported")
            configs = {c.name: config_value(c.name, c.value) for c in t.configs}
            topic_config.check_configs(configs, allow_unset=True)  # unknown names and bad values: INVALID_CONFIG
            if req.validate_only:
                validate_topic_name(t.name)
                if not 1 <= n <= 10_000:
                    raise InvalidField("num_partitions", f"{n} out of range")
            else:
                ctx.node.create_topic(t.name, n, {k: v for k, v in configs.items() if v is not None})
        except InvalidField as exc:
            code = (errors.INVALID_CONFIG if exc.field.startswith("configs") else
                    errors.INVALID_PARTITIONS if "partitions" in exc.field else errors.INVALID_REQUEST)
            out.update(error_code=code, error_message=refusal_text(exc))
        except Exception as exc:  # noqa: BLE001 - answered per topic with Kafka's code
            out.update(error_code=errors.code_for(exc), error_message=str(exc))
        return out

    results = [await ctx.run(create, t) for t in req.topics]
    return build(APIS[19].response, version, throttle_time_ms=0, topics=results)


async def delete_topics(ctx: Context, req: Any, version: int) -> Any:
    def delete(name: str) -> dict[str, Any]:
        try:
            ctx.node.delete_topic(name)
        except Exception as exc:  # noqa: BLE001 - answered per topic with Kafka's code
            return dict(name=name, error_code=errors.code_for(exc), error_message=str(exc))
        return dict(name=name, error_code=errors.NONE, error_message=None)

    results = [await ctx.run(delete, n) for n in req.topic_names]
    return build(APIS[20].response, version, throttle_time_ms=0, responses=results)


async def create_partitions(ctx: Context, req: Any, version: int) -> Any:
    named = [t.name for t in req.topics]
    twice = {n for n in named if named.count(n) > 1}

    def grow(t: Any) -> dict[str, Any]:
        try:
            if t.name in twice:
                return dict(name=t.name, error_code=errors.INVALID_REQUEST,
                            error_message=f"topic {t.name!r} is named more than once in the request")
            if t.assignments:
                return dict(name=t.name, error_code=errors.INVALID_REPLICA_ASSIGNMENT,
                            error_message="manual partition assignments are not supported: the cluster places "
                                          "new partitions on its live nodes")
            if req.validate_only:
                check_growth(t.name, ctx.node.describe_topic(t.name)["partitions"], t.count)
            else:
                ctx.node.add_partitions(t.name, t.count)
        except InvalidField as exc:
            return dict(name=t.name, error_code=errors.INVALID_PARTITIONS, error_message=refusal_text(exc))
        except Exception as exc:  # noqa: BLE001 - answered per topic with Kafka's code
            return dict(name=t.name, error_code=errors.code_for(exc), error_message=str(exc))
        return dict(name=t.name, error_code=errors.NONE, error_message=None)

    results = [await ctx.run(grow, t) for t in req.topics]
    return build(APIS[37].response, version, throttle_time_ms=0, results=results)
