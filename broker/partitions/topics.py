"""Topic registry in the controller metadata KV: names, topic ids, and each partition's two streams.

KV layout (every value JSON or a plain string):

    topics/<name>               {"topic_id": 7, "partitions": 3, "created_ms": ...}
    topic_ids/<topic_id>        <name>            (the id -> name map message ids need)
    partitions/<topic_id>/<p>   {"meta_stream": 12, "data_stream": 13}
    topic_configs/<name>        {"retention.ms": ...}   (see topic_config.py; absent = server defaults)
    deleted_topics/<name>       {"topic_id": 7, "deleted_ms": ...}   (the name's last deletion)

A partition maps to a meta stream (its state records: start offset, clean-shutdown flag, index
checkpoint; see partition_state.py) and a data stream (its Kafka record batches, stream offsets = Kafka
offsets). Creation order: reserve a topic id (first writer wins), create the 2N streams in one
transaction, write the partition keys, and publish `topics/<name>` last with put-if-absent, so a topic
is visible only once complete and two creators of one name cannot both succeed.

Deletion (`delete`) is one metadata transaction: the 2N streams are deleted (whichever node holds them),
and `topics/<name>`, the partition keys, the configs, the committed group offsets and any keys the caller
adds (the cluster's leader assignments) go with them; `deleted_topics/<name>` records it. `topic_ids/<id>`
stays, so the id is never given to another topic and old message ids never name a new topic's records. A
topic created again under the name gets a new id and new streams, and starts empty at offset 0.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.errors import InvalidField, InvalidRequest
from broker.metadata import MetadataClient
from broker.partitions import topic_config
from broker.partitions.kafka_clients import group_offsets
from broker.partitions.topic_errors import InvalidTopicName, TopicExists, TopicNotFound

log = logging.getLogger("mqindex.broker.topics")

MAX_NAME = 249
MAX_PARTITIONS = 10_000
_NAME_RE = re.compile(r"[a-zA-Z0-9._-]+")


def is_topic_name(name: object) -> bool:
    """Whether a topic could have this name (validate_topic_name's rules, without the error)."""
    return isinstance(name, str) and len(name) <= MAX_NAME and bool(_NAME_RE.fullmatch(name)) and \
        name not in (".", "..")


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


def check_growth(name: str, now: int, count: object) -> int:
    """`count` if it is a partition count the topic `name`, which has `now` partitions, can grow to; InvalidField
    otherwise (not an integer in range, or not more than it has: a count only grows, as Kafka's)."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidField("partitions", f"must be an integer in [1, {MAX_PARTITIONS}], got {count!r}")
    if count <= now:
        raise InvalidField("partitions", f"can only grow: topic {name!r} has {now} partitions (asked for {count})")
    return count


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
        # claimed only if absent: a deleted topic's id keeps its name there, so "holds this name" would not tell
        # this creation's claim from an earlier topic of the same name (the id would be given again)
        while not self.meta.kv_update_if({f"topic_ids/{topic_id}": None}, {f"topic_ids/{topic_id}": name}):
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
        # the topic and its configs in one transaction, by the creator that wins the name only: a change of the
        # topic right after (partitions added, configs altered, a deletion) cannot come between them
        put = {f"topics/{name}": body}
        if checked:
            put[topic_config.kv_key(name)] = topic_config.encode(checked)
        if not self.meta.kv_update_if({f"topics/{name}": None}, put, delete=[topic_config.kv_key(name)]):
            log.warning("topic created concurrently; streams left unused",
                        extra={"topic": name, "topic_id": topic_id, "streams": sids})
            raise TopicExists(name)
        log.info("topic created", extra={"topic": name, "topic_id": topic_id, "partitions": partitions,
                                         "streams": sids})
        return TopicInfo(name, topic_id, partitions, created, streams)

    def add_partitions(self, name: str, count: object, also_put: Callable[[TopicInfo, int], dict[str, str]] | None
                       = None) -> tuple[TopicInfo, TopicInfo]:
        """Grow the topic to `count` partitions (Kafka's CreatePartitions: a count, never fewer); returns the topic
        (before, after). The new partitions' streams are created first, then their keys, the new count and
        `also_put(before, count)` (the cluster's leaders of the new partitions: never a count without them) in one
        transaction, only if `topics/<name>` is still what was read. When it changed meanwhile (partitions added by
        another caller) the streams are left unused, as a creation that lost its name leaves them, and it is read
        again: a count that still grows is added, one that no longer does is refused (InvalidField), a topic
        deleted meanwhile is TopicNotFound. Existing partitions keep their streams and records; keys hash over the
        new count from then on, as in Kafka."""
        check_growth(name, 0, count)
        topic_id = None
        for _ in range(100):
            raw = self.meta.kv_get(f"topics/{name}")
            before = self.get(name, refresh=False) if raw is not None else None
            if raw is None or before is None or topic_id not in (None, before.topic_id):
                validate_topic_name(name)
                raise TopicNotFound(name)  # (deleted, or deleted and created again, while this one was added)
            topic_id = before.topic_id
            count = check_growth(name, before.partitions, count)
            added = count - before.partitions
            sids = self.meta.create_streams(2 * added)
            new = tuple(PartitionStreams(sids[2 * i], sids[2 * i + 1]) for i in range(added))
            keys = {f"partitions/{before.topic_id}/{before.partitions + i}":
                    json.dumps({"meta_stream": s.meta_stream, "data_stream": s.data_stream})
                    for i, s in enumerate(new)}
            body = json.dumps({**json.loads(raw), "partitions": count}, sort_keys=True)
            # the new partitions' keys and the count in one transaction, if the topic is still what was read
            extra = also_put(before, count) if also_put is not None else {}
            if self.meta.kv_update_if({f"topics/{name}": raw}, {**extra, **keys, f"topics/{name}": body}):
                break
            # changed meanwhile (partitions added by another caller, or deleted): read again
            log.info("topic changed while partitions were added; streams left unused, trying again",
                     extra={"topic": name, "topic_id": before.topic_id, "streams": sids})
        else:
            raise RuntimeError(f"topic {name!r}: changed on every one of 100 tries to add partitions")
        after = TopicInfo(name, before.topic_id, count, before.created_ms, before.streams + new)
        log.info("partitions added", extra={"topic": name, "topic_id": before.topic_id, "partitions_before":
                                            before.partitions, "partitions": count, "streams": sids})
        return before, after

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
        """Set (value) or remove (None) configs of an existing topic; returns the topic's configs after. Written
        only if the topic and its configs are still what they were read as (else read again): a topic deleted
        meanwhile is TopicNotFound, never configs left behind for a topic created later under the name, and two
        alterations at once both count."""
        checked = topic_config.check_configs(change, allow_unset=True)
        key = topic_config.kv_key(name)
        for _ in range(100):
            topic = self.meta.kv_get(f"topics/{name}")
            if topic is None:
                validate_topic_name(name)
                raise TopicNotFound(name)
            raw = self.meta.kv_get(key, refresh=False)
            after = topic_config.merge(topic_config.decode(name, raw), checked)
            kept = {**topic_config.later_versions(raw), **after}  # configs of a later version's names stay
            if self.meta.kv_set_if({f"topics/{name}": topic, key: raw}, key,
                                   topic_config.encode(kept) if kept else None):
                log.info("topic configs altered", extra={"topic": name, "configs": after})
                return after
        raise RuntimeError(f"topic {name!r}: configs changed on every one of 100 tries")

    def delete(self, name: str, also_drop: Callable[[TopicInfo], Callable[[str], bool]] | None = None
               ) -> TopicInfo:
        """Delete the topic (see the module docstring); returns what it was. `also_drop(info)` names more
        KV keys to drop in the same transaction. TopicNotFound when there is no such topic. A topic given more
        partitions while it was read is read again and deleted whole."""
        validate_topic_name(name)
        first: int | None = None  # the id of the topic the first try read: only that topic is deleted
        for _ in range(100):
            info, first = self._delete_once(name, also_drop, first)
            if info is not None:
                return info
        raise RuntimeError(f"topic {name!r}: changed on every one of 100 tries to delete it")

    def _delete_once(self, name: str, also_drop: Callable[[TopicInfo], Callable[[str], bool]] | None,
                     same_id: int | None) -> tuple[TopicInfo | None, int]:
        """One try of `delete`: (what was deleted, or None when the topic changed between the read and the
        transaction; the id read). `same_id`: the id a try before read (another topic of the name since, one
        created again under it, is TopicNotFound)."""
        raw = self.meta.kv_get(f"topics/{name}")
        info = self.get(name, refresh=False) if raw is not None else None
        if raw is None or info is None or same_id not in (None, info.topic_id):
            raise TopicNotFound(name)
        extra = also_drop(info) if also_drop is not None else (lambda k: False)
        own = {f"topics/{name}", topic_config.kv_key(name)}
        part_prefix = f"partitions/{info.topic_id}/"

        def drop(key: str) -> bool:
            return (key in own or key.startswith(part_prefix) or group_offsets.is_topic_key(key, name)
                    or extra(key))

        tombstone = json.dumps({"topic_id": info.topic_id, "deleted_ms": int(time.time() * 1000)}, sort_keys=True)
        try:
            self.meta.delete_streams([sid for s in info.streams for sid in (s.meta_stream, s.data_stream)],
                                     kv_expect={f"topics/{name}": raw}, kv_drop=drop,
                                     kv_put={f"deleted_topics/{name}": tombstone})
        except InvalidRequest:
            return None, info.topic_id  # changed meanwhile: deleted, created again, or given more partitions
        log.info("topic deleted", extra={"topic": name, "topic_id": info.topic_id, "partitions": info.partitions,
                                         "streams": [sid for s in info.streams for sid in (s.meta_stream,
                                                                                            s.data_stream)]})
        return info, info.topic_id

    def deleted_before(self, name: str, refresh: bool = False) -> bool:
        """Whether a topic of this name was deleted at some time (its index entries may still be stored)."""
        return self.meta.kv_get(f"deleted_topics/{name}", refresh=refresh) is not None

    def topic_id_of(self, name: str, refresh: bool = False) -> int | None:
        """The id of the live topic of this name (None: no such topic)."""
        raw = self.meta.kv_get(f"topics/{name}", refresh=refresh)
        return None if raw is None else int(json.loads(raw)["topic_id"])

    def name_of(self, topic_id: int) -> str | None:
        return self.meta.kv_get(f"topic_ids/{topic_id}")

    def bodies(self) -> dict[str, str]:
        """Every live topic's name -> its stored `topics/<name>` value (unchanged values are the same objects from
        one call to the next while the image holds them: a caller can tell a change without parsing)."""
        return {k.split("/", 1)[1]: v for k, v in self.meta.kv_items("topics/", refresh=False).items()}

    @staticmethod
    def count_in(body: str) -> int:
        """The partition count a `topics/<name>` value holds."""
        return int(json.loads(body)["partitions"])

    def names(self) -> list[str]:
        return sorted(k.split("/", 1)[1] for k in self.meta.kv_items("topics/"))
