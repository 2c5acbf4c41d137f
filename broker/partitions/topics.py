"""Topic registry in the controller metadata KV: names, topic ids, and each partition's two streams.

KV layout (every value JSON or a plain string):

    topics/<name>               {"topic_id": 7, "partitions": 3, "created_ms": ...}
    topic_ids/<topic_id>        <name>            (the id -> name map message ids need)
    partitions/<topic_id>/<p>   {"meta_stream": 12, "data_stream": 13}
    topic_configs/<name>        {"retention.ms": ...}   (see topic_config.py; absent = server defaults)

A partition maps to a meta stream (its state records: start offset, clean-shutdown flag, index
checkpoint; see partition_state.py) and a data stream (its Kafka record batches, stream offsets = Kafka
offsets). Creation order: reserve a topic id (first writer wins), create the 2N streams in one
transaction, write the partition keys, and publish `topics/<name>` last with put-if-absent, so a topic
is visible only once complete and two creators of one name cannot both succeed.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass

from broker.errors import InvalidField
from broker.metadata import MetadataClient
from broker.partitions import topic_config
from broker.partitions.topic_errors import InvalidTopicName, TopicExists, TopicNotFound

log = logging.getLogger("mqindex.broker.topics")

MAX_NAME = 249
MAX_PARTITIONS = 10_000
_NAME_RE = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidTopicName(str(name), "must be a string")
    if not name:
        raise InvalidTopicName(name, "is empty")
    if len(name) > MAX_NAME:
        raise InvalidTopicName(name[:40] + "...", f"is {len(name)} characters, longer than {MAX_NAME}")
    if not _NAME_RE.fullmatch(name):
        raise InvalidTopicName(name, "may only hold the characters [a-zA-Z0-9._-]")
    if name in (".", ".."):
        raise InvalidTopicName(name, "cannot be '.' or '..'")
    return name


@dataclass(frozen=True)
class PartitionStreams:
    meta_stream: int
    data_stream: int


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: int
    partitions: int
    created_ms: int
    streams: tuple[PartitionStreams, ...]

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "partitions": self.partitions, "topic_id": self.topic_id}


class TopicRegistry:
    """Reads and writes the topic keys of the KV through one MetadataClient."""

    def __init__(self, meta: MetadataClient) -> None:
        self.meta = meta

    def create(self, name: str, partitions: int, configs: dict[str, int] | None = None) -> TopicInfo:
        validate_topic_name(name)
        checked = {k: v for k, v in topic_config.check_configs(configs or {}).items() if v is not None}
        if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidField("partitions", f"must be an integer in [1, {MAX_PARTITIONS}], got {partitions!r}")
        if self.meta.kv_get(f"topics/{name}") is not None:
            raise TopicExists(name)
        ids = [int(k.split("/", 1)[1]) for k in self.meta.kv_items("topic_ids/")]
        topic_id = max(ids, default=0) + 1
        while self.meta.kv_put_if_absent(f"topic_ids/{topic_id}", name) != name:
            topic_id += 1
        if topic_id >= 1 << 32:
            raise InvalidField("name", "cannot be created: topic ids are exhausted")
        sids = self.meta.create_streams(2 * partitions)
        streams = tuple(PartitionStreams(sids[2 * p], sids[2 * p + 1]) for p in range(partitions))
        self.meta.kv_put_many({f"partitions/{topic_id}/{p}": json.dumps({"meta_stream": s.meta_stream,
                                                                           "data_stream": s.data_stream})
                               for p, s in enumerate(streams)})
        created = int(time.time() * 1000)
        body = json.dumps({"topic_id": topic_id, "partitions": partitions, "created_ms": created}, sort_keys=True)
        if self.meta.kv_put_if_absent(f"topics/{name}", body) != body:
            log.warning("topic created concurrently; streams left unused",
                        extra={"topic": name, "topic_id": topic_id, "streams": sids})
            raise TopicExists(name)
        if checked:  # written by the creator that won the name only
            self.meta.kv_put(topic_config.kv_key(name), topic_config.encode(checked))
        log.info("topic created", extra={"topic": name, "topic_id": topic_id, "partitions": partitions,
                                         "streams": sids})
        return TopicInfo(name, topic_id, partitions, created, streams)

    def get(self, name: str, refresh: bool = True) -> TopicInfo | None:
        raw = self.meta.kv_get(f"topics/{name}", refresh=refresh)
        if raw is None:
            return None
        body = json.loads(raw)
        topic_id, n = int(body["topic_id"]), int(body["partitions"])
        streams = []
        for p in range(n):
            s = json.loads(self.meta.kv_get(f"partitions/{topic_id}/{p}", refresh=False) or "null")
            if s is None:
                raise RuntimeError(f"topic {name!r}: partition {p} has no streams in the metadata KV")
            streams.append(PartitionStreams(int(s["meta_stream"]), int(s["data_stream"])))
        return TopicInfo(name, topic_id, n, int(body.get("created_ms", 0)), tuple(streams))

    def configs(self, name: str, refresh: bool = True) -> dict[str, int]:
        """The configs the topic sets (absent keys take the server defaults)."""
        return topic_config.decode(name, self.meta.kv_get(topic_config.kv_key(name), refresh=refresh))

    def alter_configs(self, name: str, change: object) -> dict[str, int]:
        """Set (value) or remove (None) configs of an existing topic; returns the topic's configs after."""
        checked = topic_config.check_configs(change, allow_unset=True)
        if self.meta.kv_get(f"topics/{name}") is None:
            validate_topic_name(name)
            raise TopicNotFound(name)
        after = topic_config.merge(self.configs(name, refresh=False), checked)
        if after:
            self.meta.kv_put(topic_config.kv_key(name), topic_config.encode(after))
        else:
            self.meta.kv_delete(topic_config.kv_key(name))
        log.info("topic configs altered", extra={"topic": name, "configs": after})
        return after

    def name_of(self, topic_id: int) -> str | None:
        return self.meta.kv_get(f"topic_ids/{topic_id}")

    def names(self) -> list[str]:
        return sorted(k.split("/", 1)[1] for k in self.meta.kv_items("topics/"))
