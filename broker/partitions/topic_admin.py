"""What the admin API shows: a topic with its configs (own and defaulted), and a node's effective settings."""

from __future__ import annotations

import dataclasses
from typing import Any

from broker.partitions import topic_config
from broker.partitions.partition_map import PartitionMap


def describe(parts: PartitionMap, name: str, defaults: topic_config.ServerDefaults) -> dict[str, Any]:
    """{"name", "partitions", "topic_id", "configs": {"retention.ms": {"value", "source"}, ...}}."""
    info = parts.topic(name)
    own = parts.registry.configs(name)
    out = info.as_dict()
    out["configs"] = topic_config.describe(own, defaults)
    return out


def effective_config(node_settings: dict[str, Any], index_config: object) -> dict[str, Any]:
    """The node's settings and its index's (ServiceConfig fields that are values, not hooks)."""
    index: dict[str, Any] = {}
    if dataclasses.is_dataclass(index_config):
        for f in dataclasses.fields(index_config):
            v = getattr(index_config, f.name)
            if v is None or isinstance(v, (bool, int, float, str)):
                index[f.name] = v
            elif isinstance(v, tuple) and all(isinstance(x, int) for x in v):
                index[f.name] = list(v)  # the merge tiers' spans
    return {"broker": dict(node_settings), "index": index}
