"""PartitionMap: the topics and partitions this node knows, which of them it leads, and their lifecycle.

- `add_topic` learns a topic (from the registry in the controller metadata);
- `claim` opens the meta and data streams of each partition no other node holds, at epoch + 1 (one
  metadata transaction; a partition whose two streams did not both open is released again);
- `load_states` / `write_states` read and write the partition state records of the meta streams;
- `on_lost` (wired to StreamStorage.on_lost) stops serving partitions whose streams were fenced;
- `topic` / `partition` resolve and validate names from requests; `bounds` and `records` read.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from broker.errors import InvalidField, NotLeader, NotOwner, OffsetOutOfRange
from broker.metadata import MetadataClient
from broker.partitions.client_messages import OutMessage
from broker.partitions.damage import BatchTaker, batch_lists, parsed_record_lists, parsed_records
from broker.partitions.index_claims import IndexClaims
from broker.partitions.partition import Partition
from broker.partitions.partition_state import PartitionState
from broker.partitions.records import Record
from broker.partitions.topic_errors import PartitionNotFound, TopicNotFound
from broker.partitions.topics import TopicInfo, TopicRegistry, validate_topic_name
from broker.streams import Stream, StreamStorage

T = TypeVar("T")

log = logging.getLogger("mqindex.broker.partitions")

#: why a partition claimed by a failover is not served yet: the previous leader's acknowledged records are being
#: replayed into it (broker/cluster/failover.py); nothing else may serve it meanwhile
REPLAYING = "opening: replaying the previous leader's WAL"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionMap:
    def __init__(self, meta: MetadataClient, storage: StreamStorage, node_id: int) -> None:
        self.meta = meta
        self.storage = storage
        self.node_id = node_id
        self.registry = TopicRegistry(meta)
        self.checkpoint: Callable[[str, int], int | None] = lambda topic, partition: None
        # the index forgets a deleted topic's queues (all, or the listed ones), in dispatch order
        self.forget_index: Callable[[str, list[int] | None], None] = lambda topic, partitions: None
        self.index_claims: IndexClaims | None = None  # set with the index (index_link.open_index)
        # the cluster's answers (broker/cluster): the leader of a partition (node id, HTTP address) when
        # another node leads it, and a message read from the node that holds it
        self.leader_elsewhere: Callable[[Partition], tuple[int, str | None] | None] = lambda p: None
        self.remote_message: Callable[[str, int, int], OutMessage | None] | None = None
        self.closed = False
        self.unclean: list[str] = []
        self._topics: dict[str, TopicInfo] = {}
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._by_stream: dict[int, Partition] = {}
        self._names_by_id: dict[int, str] = {}
        #: ids of the topics forgotten here as deleted: never learnt again (ids are never given to another topic;
        #: a read of the registry made before a deletion may try, see `add_topic`)
        self._forgotten_ids: set[int] = set()
        self._lock = threading.RLock()
        self._claim_lock = threading.Lock()
        storage.on_lost = self.on_lost

    # -- learning and claiming --------------------------------------------------------------------
    def load_all(self) -> list[Partition]:
        for name in self.registry.names():
            info = self.registry.get(name, refresh=False)
            if info is not None:
                self.add_topic(info)
        with self._lock:
            return list(self._partitions.values())

    def add_topic(self, info: TopicInfo) -> list[Partition]:
        """Serve the topic's partitions from this map. A topic forgotten as deleted is not added back: the caller
        read it from the registry before the deletion, and this map forgot it since (it would be served again,
        its streams gone, until the node restarted)."""
        known = self.cached_topic(info.name)
        if known is not None and known.topic_id > info.topic_id:  # read before the topic known here replaced it
            return []
        if known is not None and known.topic_id != info.topic_id:  # deleted and created again meanwhile
            self.forget_topic(known.name, known.topic_id)
        with self._lock:
            if info.topic_id in self._forgotten_ids:
                return []
            known = self._topics.get(info.name)
            if known is None or known.topic_id != info.topic_id or known.partitions < info.partitions:
                # (a read from before partitions were added never takes the place of the count known since)
                self._topics[info.name] = info
            self._names_by_id[info.topic_id] = info.name
            out = []
            for i, s in enumerate(info.streams):
                key = (info.name, i)
                if key not in self._partitions:
                    p = Partition(info, i, s.meta_stream, s.data_stream)
                    self._partitions[key] = p
                    self._by_stream[s.meta_stream] = p
                    self._by_stream[s.data_stream] = p
                    out.append(p)
            return out

    def claim(self, parts: list[Partition], serve: bool = True) -> None:
        """Open the meta and data streams of each partition no other node holds, at a new epoch. With
        serve=False the streams are open but the partition is not served yet (`owned` stays False until the
        caller calls `serve`): a failover first replays the dead node's WAL into them."""
        with self._claim_lock:  # the watcher, topic creation and failover may claim at once
            self._claim([p for p in parts if p.data is None], serve)  # not the ones open here already

    def _claim(self, parts: list[Partition], serve: bool) -> None:
        if not parts:
            return
        self.meta.catch_up()
        requests = []
        for p in parts:
            ms = self.meta.get_stream(p.meta_stream, refresh=False)
            ds = self.meta.get_stream(p.data_stream, refresh=False)
            holders = [o for o in map(self.storage.held_elsewhere, (p.data_stream, p.meta_stream)) if o is not None]
            if holders:
                p.owned, p.why_not_owned = False, f"opened by node {holders[0]}"
                continue
            p.epoch = max(ms.epoch, ds.epoch) + 1
            requests += [(p.meta_stream, p.epoch), (p.data_stream, p.epoch)]
        opened = self.storage.open_streams(requests)
        undo: list[Stream] = []
        for p in parts:
            if p.meta_stream not in opened:
                continue
            m, d = opened[p.meta_stream], opened[p.data_stream]
            if isinstance(m, Stream) and isinstance(d, Stream):
                p.meta, p.data = m, d
                if serve:
                    p.owned = True
                else:
                    p.why_not_owned = REPLAYING
                continue
            p.owned = False
            p.why_not_owned = "; ".join(r for r in (m, d) if isinstance(r, str))
            undo += [s for s in (m, d) if isinstance(s, Stream)]
            log.warning("partition not opened", extra={"topic": p.topic.name, "partition": p.index,
                                                       "epoch": p.epoch, "reason": p.why_not_owned})
        if undo:
            self.storage.close_streams(undo)

    def serve(self, parts: list[Partition]) -> None:
        """Start serving partitions claimed with serve=False."""
        for p in parts:
            if p.data is not None and p.meta is not None and not (p.data.fenced or p.meta.fenced):
                with p.lock:
                    p.owned, p.why_not_owned = True, ""

    def load_states(self, parts: list[Partition], served: bool = True) -> None:
        """served=False: also the partitions claimed with serve=False (their streams open here)."""
        for p in parts:
            if (p.owned or (not served and p.data is not None and p.meta is not None)) and not p.load_state():
                self.unclean.append(p.name)

    def write_states(self, parts: list[Partition], clean: bool) -> None:
        """Append a state record to each owned partition's meta stream and wait until they are durable."""
        futures = []
        for p in parts:
            if not p.owned:
                continue
            ck = self.checkpoint(p.topic.name, p.index)
            futures.append(p.write_state(PartitionState(self.start_offset(p), clean, ck, self.node_id, p.epoch,
                                                        now_ms())))
        for f in futures:
            f.result()

    def list_topics(self) -> list[TopicInfo]:
        out = []
        for name in self.registry.names():
            info = self.cached_topic(name) or self.registry.get(name, refresh=False)
            if info is not None:
                out.append(info)
        return out

    def learn_and_claim(self, info: TopicInfo) -> list[Partition]:
        parts = self.add_topic(info)
        if parts and not self.closed:
            self.claim(parts)  # created by another node: take the partitions nobody holds
            self.write_states([p for p in parts if p.owned], clean=False)
        return parts

    def close_all(self, owned: list[Partition], clean: bool) -> bool:
        """Clean shutdown of the partitions led here (their data already uploaded): a clean_shutdown state
        record, uploaded; meta streams trimmed to it; the WAL closed; the streams closed at their epochs.
        With clean=False (or when any step fails) the streams stay open and the next open recovers from the
        WAL. Returns whether the shutdown was clean."""
        try:
            if clean:
                self.write_states(owned, clean=True)
                self.storage.force_upload()
                for p in owned:
                    p.trim_meta()
                clean = self.storage.cache.size == 0
        except Exception as exc:  # noqa: BLE001
            clean = False
            log.error("clean shutdown incomplete; the next open recovers", extra={"error": str(exc)})
        self.storage.close()
        if clean and owned:
            try:
                self.storage.close_streams([s for p in owned for s in p.streams])
            except Exception as exc:  # noqa: BLE001
                clean = False  # streams left open: not a clean stop (the lease must not say shut down)
                log.error("closing streams failed", extra={"error": str(exc)})
        return clean

    def on_lost(self, streams: list[Stream], exc: Exception) -> None:
        """Streams fenced by a newer owner: stop serving their partitions (both streams of each)."""
        siblings = []
        for s in streams:
            p = self._by_stream.get(s.stream_id)
            if p is None or not p.owned:
                continue
            with p.lock:
                p.owned, p.why_not_owned = False, f"fenced: {exc}"
            siblings += [x for x in p.streams if x is not s and not x.fenced]
            p.meta = p.data = None
            log.error("partition fenced: another owner holds its streams", extra={
                "topic": p.topic.name, "partition": p.index, "stream": s.stream_id, "epoch": p.epoch,
                "error": str(exc)})
        if siblings:
            self.storage.abandon(siblings)

    # -- deletion ---------------------------------------------------------------------------------
    def forget_topic(self, name: str, topic_id: int) -> list[Partition]:
        """The topic was deleted (its streams are gone from the metadata): stop serving its partitions, drop
        what the log cache holds of them and stop them holding the WAL back, so nothing of it is uploaded or
        replayed. Returns the partitions this node led."""
        with self._lock:
            info = self._topics.get(name)
            if info is None or info.topic_id != topic_id:
                return []
            del self._topics[name]
            self._forgotten_ids.add(topic_id)
            if self._names_by_id.get(topic_id) == name:
                del self._names_by_id[topic_id]
            # every partition of the topic held here, those a count learnt later added included
            parts = [self._partitions.pop(k) for k, p in list(self._partitions.items())
                     if k[0] == name and p.topic.topic_id == topic_id]
            for p in parts:
                self._by_stream.pop(p.meta_stream, None)
                self._by_stream.pop(p.data_stream, None)
        led = []
        for p in parts:
            with p.lock:  # no append is between choosing its offset and queueing it
                was_owned, streams = p.owned, p.streams
                p.owned, p.why_not_owned = False, "topic deleted"
                p.meta = p.data = None
            # appends queued before: their completion (log cache, index dispatch) runs before what follows
            deadline = time.monotonic() + 10.0
            while any(x.confirmed_end < x.next_offset for x in streams) and time.monotonic() < deadline:
                time.sleep(0.002)
            if streams:
                self.storage.abandon(streams)
            if was_owned:
                led.append(p)
        try:  # a topic created again under the name starts at offset 0: the index must not skip it
            self.forget_index(name, None)
        except Exception as exc:  # noqa: BLE001 - a stale checkpoint is also caught when a partition opens
            log.error("index checkpoints of a deleted topic not reset", extra={"topic": name, "error": str(exc)})
        log.info("topic forgotten: deleted", extra={"topic": name, "topic_id": topic_id, "node": self.node_id,
                                                    "partitions_led": [p.index for p in led]})
        return led

    def forget_deleted(self) -> list[str]:
        """Forget every known topic the (caught-up) metadata no longer has under its id; returns their names."""
        with self._lock:
            known = [(info.name, info.topic_id) for info in self._topics.values()]
        gone = [(n, tid) for n, tid in known if self.registry.topic_id_of(n) != tid]
        for n, tid in gone:
            self.forget_topic(n, tid)
        return [n for n, _ in gone]

    # -- lookups ----------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicInfo:
        if not isinstance(name, str):
            raise InvalidField("topic", "must be a string")
        with self._lock:
            info = self._topics.get(name)
        if info is not None:
            return info
        info = self.registry.get(name)
        if info is None:
            validate_topic_name(name)
            raise TopicNotFound(name)
        self.learn_and_claim(info)
        with self._lock:
            if info.topic_id in self._forgotten_ids:  # deleted since the registry was read
                raise TopicNotFound(name)
            known = self._topics.get(name)
        return known if known is not None and known.topic_id == info.topic_id else info

    def cached_topic(self, name: str) -> TopicInfo | None:
        with self._lock:
            return self._topics.get(name)

    def name_of(self, topic_id: int) -> str | None:
        with self._lock:
            name = self._names_by_id.get(topic_id)
        return name if name is not None else self.registry.name_of(topic_id)

    def partition(self, info: TopicInfo, partition: object, field_name: str = "partition") -> Partition:
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise InvalidField(field_name, f"must be an integer, got {partition!r}")
        if not 0 <= partition < info.partitions:
            raise PartitionNotFound(info.name, partition, info.partitions, field_name)
        p = self._partitions.get((info.name, partition))
        if p is None or p.topic.topic_id != info.topic_id:
            raise TopicNotFound(info.name)  # deleted while the request was under way
        return p

    def get(self, topic: str, partition: int) -> Partition:
        p = self._partitions.get((topic, partition))
        if p is None:
            raise TopicNotFound(topic)
        return p

    def all(self) -> list[Partition]:
        with self._lock:
            return list(self._partitions.values())

    def not_served(self, p: Partition) -> NotOwner:
        """The error for a request this node cannot serve for `p`: NotLeader naming the leader when
        another node leads it (retry there), NotOwner (retry later) while it is moving or opening."""
        where = self.leader_elsewhere(p)
        if where is not None:
            return NotLeader(f"partition {p.name} is led by node {where[0]}", where[0], where[1])
        return NotOwner(f"partition {p.name} is not served by node {self.node_id}: {p.why_not_owned}")

    def index_checkpoint(self, p: Partition) -> int | None:
        """The index's checkpoint of a partition led here. One at or beyond the partition's end is stale (a
        deleted topic's, whose name was created again, or offsets lost with a dead node's local WAL that will
        be written again): the index forgets it, so the records written at those offsets are indexed."""
        ck = self.checkpoint(p.topic.name, p.index)
        if ck is not None and ck >= p.acked_end:
            log.warning("index checkpoint beyond the partition's end: reset", extra={
                "topic": p.topic.name, "partition": p.index, "checkpoint": ck, "end_offset": p.acked_end})
            self.forget_index(p.topic.name, [p.index])
            return None
        return ck

    def owned(self) -> list[Partition]:
        with self._lock:
            return [p for p in self._partitions.values() if p.owned]

    def start_offset(self, p: Partition) -> int:
        return self.meta.get_stream(p.data_stream, refresh=False).start_offset

    def bounds(self, p: Partition) -> tuple[int, int]:
        """[start, end) readable now: acknowledged records when this node leads, committed ones otherwise."""
        if p.owned:
            return self.start_offset(p), p.acked_end
        s = self.meta.get_stream(p.data_stream)
        return s.start_offset, s.end_offset

    def describe(self, topic: str, partition: int) -> dict[str, object]:
        info = self.topic(topic)
        p = self.partition(info, partition)
        start, end = self.bounds(p)
        return {"topic": info.name, "partition": p.index, "owned": p.owned, "epoch": p.epoch,
                "meta_stream": p.meta_stream, "data_stream": p.data_stream, "start_offset": start,
                "end_offset": end, "state": dataclasses.asdict(p.state)}

    def records(self, p: Partition, start: int, end: int) -> Iterator[Record]:
        """Kafka records with offsets in [start, end), in order."""
        try:
            yield from parsed_records(self.storage.reader, p.data_stream, self.storage.read(p.data_stream, start, end),
                                      start, end)
        except OffsetOutOfRange:
            return  # trimmed by retention meanwhile

    def record_lists(self, p: Partition, start: int, end: int) -> Iterator[list[Record]]:
        """`records` in lists (one per stored batch run), for pages of whole records."""
        try:
            yield from parsed_record_lists(self.storage.reader, p.data_stream,
                                           self.storage.read(p.data_stream, start, end), start, end)
        except OffsetOutOfRange:
            return  # trimmed by retention meanwhile

    def batch_lists(self, p: Partition, start: int, end: int, take: BatchTaker[T]) -> Iterator[list[T]]:
        """What `take` makes of each stored batch holding records of [start, end), in lists (one per stored
        batch run); damage as for `records`."""
        try:
            yield from batch_lists(self.storage.reader, p.data_stream, self.storage.read(p.data_stream, start, end),
                                   start, end, take)
        except OffsetOutOfRange:
            return  # trimmed by retention meanwhile
