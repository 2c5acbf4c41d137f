"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topic configs (retention.ms, retention.bytes,
max.message.bytes).

The configs are the broker's (broker/partitions/topic_config.py, kept in the controller metadata KV), the same
ones `GET /v1/topics/{topic}` shows and `PATCH /v1/topics/{topic}/configs` changes. A broker resource is
described with no configs (the node's settings are not Kafka configs) and cannot be altered.
"""

from __future__ import annotations

from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.schemas import APIS, build
from broker.errors import InvalidField
from broker.partitions import topic_config

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# Kafka's DescribeConfigsResponse.ConfigSource and ConfigType
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
INT, LONG = 3, 5
#: each config's Kafka type, as DescribeConfigs reports it (max.message.bytes is an int config in Kafka)
_TYPES = {topic_config.MAX_MESSAGE_BYTES: INT}


def config_value(name: str, value: str | None) -> int | None:
    """A config of a Kafka request as the broker takes it: a name it does not know is refused as such whatever
    its value (`cleanup.policy=compact` is not a supported config, not a value that "must be an integer"), then
    the value must be an integer (None: unset)."""
    if name not in topic_config.KNOWN:
        raise InvalidField(f"configs.{name}",
                           f"is not a supported topic config; the supported ones are {', '.join(topic_config.KNOWN)}")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidField(f"configs.{name}", f"must be an integer, got {value!r}") from None


def refusal_text(exc: Exception) -> str:
    """The error message of a refused config: the config's name first, as Kafka users know it."""
    return str(exc).removeprefix("configs.")


def _code(exc: Exception) -> int:
    if isinstance(exc, InvalidField):
        return errors.INVALID_CONFIG if exc.field.startswith("configs") else errors.INVALID_REQUEST
    return errors.code_for(exc)


async def describe_configs(ctx: Context, req: Any, version: int) -> Any:
    def describe(r: Any) -> dict[str, Any]:
        out: dict[str, Any] = dict(error_code=errors.NONE, error_message=None, resource_type=r.resource_type,
                                   resource_name=r.resource_name, configs=[])
        if r.resource_type == BROKER:
            return out
        if r.resource_type != TOPIC:
            out.update(error_code=errors.INVALID_REQUEST, error_message="only topic and broker resources")
            return out
        try:
            shown = ctx.node.describe_topic(r.resource_name)["configs"]
        except Exception as exc:  # noqa: BLE001 - answered per resource with Kafka's code
            out.update(error_code=errors.code_for(exc), error_message=str(exc))
            return out
        keys = r.configuration_keys
        for name, c in shown.items():
            if keys is not None and name not in keys:
                continue
            source = DYNAMIC_TOPIC_CONFIG if c["source"] == "topic" else DEFAULT_CONFIG
            value = str(c["value"])
            out["configs"].append(dict(
                name=name, value=value, read_only=False, config_source=source, is_default=source == DEFAULT_CONFIG,
                is_sensitive=False, config_type=_TYPES.get(name, LONG), documentation=None,
                synonyms=[dict(name=name, value=value, source=source)] if req.include_synonyms else []))
        return out

    results = [await ctx.run(describe, r) for r in req.resources]
    return build(APIS[32].response, version, throttle_time_ms=0, results=results)


def _alter(ctx: Context, r: Any, change: dict[str, int | None], validate_only: bool) -> dict[str, Any]:
    out: dict[str, Any] = dict(error_code=errors.NONE, error_message=None, resource_type=r.resource_type,
                               resource_name=r.resource_name)
    if r.resource_type != TOPIC:
        out.update(error_code=errors.INVALID_REQUEST, error_message="only topic configs can be altered")
        return out
    try:
        checked = topic_config.check_configs(change, allow_unset=True)
        if validate_only:
            ctx.node.describe_topic(r.resource_name)  # the topic must exist
        else:
            ctx.node.alter_topic_configs(r.resource_name, checked)
    except Exception as exc:  # noqa: BLE001 - answered per resource with Kafka's code
        out.update(error_code=_code(exc), error_message=refusal_text(exc))
    return out


async def incremental_alter_configs(ctx: Context, req: Any, version: int) -> Any:
    def alter(r: Any) -> dict[str, Any]:
        change: dict[str, int | None] = {}
        try:
            for c in r.configs:
                value = config_value(c.name, c.value if c.config_operation == SET else None)
                if c.config_operation == SET:
                    if value is None:
                        raise InvalidField(f"configs.{c.name}", "needs a value to SET (DELETE unsets it)")
                    change[c.name] = value
                elif c.config_operation == DELETE:
                    change[c.name] = None
                else:
                    raise InvalidField(f"configs.{c.name}", "is not a list: APPEND and SUBTRACT do not apply")
        except InvalidField as exc:
            return dict(error_code=errors.INVALID_CONFIG, error_message=refusal_text(exc),
                        resource_type=r.resource_type, resource_name=r.resource_name)
        return _alter(ctx, r, change, req.validate_only)

    responses = [await ctx.run(alter, r) for r in req.resources]
    return build(APIS[44].response, version, throttle_time_ms=0, responses=responses)


async def alter_configs(ctx: Context, req: Any, version: int) -> Any:
    """AlterConfigs replaces a topic's configs: the ones not given go back to the server default."""
    def alter(r: Any) -> dict[str, Any]:
        change: dict[str, int | None] = dict.fromkeys(topic_config.KNOWN)
        try:
            for c in r.configs:
                change[c.name] = config_value(c.name, c.value)
        except InvalidField as exc:
            return dict(error_code=errors.INVALID_CONFIG, error_message=refusal_text(exc),
                        resource_type=r.resource_type, resource_name=r.resource_name)
        return _alter(ctx, r, change, req.validate_only)

    responses = [await ctx.run(alter, r) for r in req.resources]
    return build(APIS[33].response, version, throttle_time_ms=0, responses=responses)
