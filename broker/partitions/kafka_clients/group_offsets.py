"""Consumer group offsets committed by Kafka clients, kept in the controller metadata KV.

    group_offsets/<group>/<topic>/<partition>   {"offset": 42, "metadata": "", "at_ms": ...}

In the metadata they survive restarts and every node reads the same values, so they move with the group
coordinator.
"""

from __future__ import annotations

import json
import time

from broker.metadata import MetadataClient

PREFIX = "group_offsets/"


def _key(group: str, topic: str, partition: int) -> str:
    return f"{PREFIX}{group}/{topic}/{partition}"


def entries(group: str, offsets: dict[tuple[str, int], tuple[int, str | None]]) -> dict[str, str]:
    """The KV keys and values that commit (offset, metadata) for each (topic, partition) of the group."""
    now = int(time.time() * 1000)
    return {_key(group, t, p): json.dumps({"offset": o, "metadata": m or "", "at_ms": now})
            for (t, p), (o, m) in offsets.items()}


def commit(meta: MetadataClient, group: str, offsets: dict[tuple[str, int], tuple[int, str | None]]) -> None:
    """Store (offset, metadata) for each (topic, partition) of the group, in one metadata transaction."""
    meta.kv_put_many(entries(group, offsets))


def is_topic_key(key: str, topic: str) -> bool:
    """Whether a KV key is a committed offset of `topic` (in any group): dropped with the topic."""
    if not key.startswith(PREFIX):
        return False
    parts = key[len(PREFIX):].rsplit("/", 2)  # topic names hold no "/", group ids may
    return len(parts) == 3 and parts[1] == topic


def fetch(meta: MetadataClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    """Every committed (topic, partition) -> (offset, metadata) of the group.

    The KV prefix `group_offsets/<group>/` also holds the keys of the groups whose id continues it with a "/"
    (group `a/b` under group `a`): only the keys whose rest is `<topic>/<partition>` are the group's own
    (topic names hold no "/")."""
    out: dict[tuple[str, int], tuple[int, str]] = {}
    prefix = f"{PREFIX}{group}/"
    for k, v in meta.kv_items(prefix).items():
        topic, _, part = k[len(prefix):].partition("/")
        if not topic or "/" in part:
            continue  # another group's key (`<group>/<more of its id>/<topic>/<partition>`)
        body = json.loads(v)
        out[(topic, int(part))] = (int(body["offset"]), str(body.get("metadata", "")))
    return out
