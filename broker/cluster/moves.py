"""The record of partition moves (balancer decisions, rebalances, reassignments) in the metadata KV.

Key `moves/<at ms, 15 digits>-<topic id>-<partition>` -> JSON {"at_ms", "topic_id", "topic", "partition",
"from", "to", "kind": "auto" | "rebalance" | "reassign", "reason", "by": the node that decided, and for the
balancer "loads" (node -> load score) and "mean"}. The newest KEEP are kept. GET /v1/cluster/moves lists them,
newest first; the balancer moves no partition moved within its cool-down.
"""

from __future__ import annotations

import json
from typing import Any

from broker.metadata import MetadataClient

PREFIX = "moves/"
KEEP = 200


def record_move(meta: MetadataClient, doc: dict[str, Any], keep: int = KEEP) -> None:
    key = f"{PREFIX}{int(doc['at_ms']):015d}-{doc['topic_id']}-{doc['partition']}"
    old = sorted(meta.kv_items(PREFIX, refresh=False))
    drop = old[:max(0, len(old) + 1 - keep)]
    meta.kv_update({key: json.dumps(doc)}, drop)


def moves(meta: MetadataClient, refresh: bool = True) -> list[dict[str, Any]]:
    """Every recorded move, newest first."""
    items = meta.kv_items(PREFIX, refresh=refresh)
    return [json.loads(items[k]) for k in sorted(items, reverse=True)]


def moved_since(meta: MetadataClient, since_ms: int) -> set[tuple[int, int]]:
    """(topic id, partition) of the partitions moved at or after `since_ms`."""
    return {(m["topic_id"], m["partition"]) for m in moves(meta, refresh=False) if m["at_ms"] >= since_ms}
