"""BrokerNode: one broker process — topics, produce, fetch, lookups, recovery, retention, and the index.

    node = BrokerNode.open(data_dir, store_url, metadata_url, node_id=0, index_config=None)
    node.create_topic("orders", 3); node.produce("orders", [InMessage(b"v", key=b"k")])
    node.fetch(...); node.get_by_id(msg_id); node.find_by_key(...); node.index_files()
    node.close()

It implements api.backend.Backend. Produce path: validate -> choose partitions -> build one Kafka
RecordBatch v2 per partition -> under the partition lock assign Kafka offsets and queue the WAL append
(so WAL order is offset order per partition) -> the WAL's group commit fsyncs -> the completion, in WAL
order, puts the record in the log cache, advances the acknowledged end and hands the index entries to the
dispatcher -> the produce call returns. The uploader thread turns the cache into objects (upload_batch:
SO/SSO split by bytes), commits them, and trims the WAL below the oldest record not yet committed.

Open (recovery): register a new node epoch; replay the WAL; close what the previous incarnation left
OPENED and open every unowned partition's meta and data streams at epoch + 1; put the WAL records
beyond each stream's committed end back in the cache (re-stamped with the new epoch) and upload them
before serving; write a partition state record (clean_shutdown=False); re-dispatch to the index from its
checkpoint. Close: upload the cache, write clean_shutdown=True with the index checkpoint, upload it,
trim the WAL, close the streams and the index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import Fenced, InvalidField, NotOwner, OffsetOutOfRange, WalError
from broker.metadata import MetadataClient
from broker.metadata.image import OPENED
from broker.objects.format import RECORD_HEADER, RECORD_HEADER_SIZE, RECORD_MAGIC, StreamRecord, encode_record
from broker.partitions.client_messages import InMessage, OutMessage, Produced
from broker.partitions.dispatcher import CatchUp, Dispatcher
from broker.partitions.key_lookup import find_by_key
from broker.partitions.message_id import decode_message_id, encode_message_id
from broker.partitions.partition_state import PartitionState
from broker.partitions.partitioner import RoundRobin, partition_for_key
from broker.partitions.reads import parsed_records, served_before_damage
from broker.partitions.records import ProducerRecord, Record, build_batch, index_keys, with_base_offset
from broker.partitions.retention import RetentionPolicy, retention_start
from broker.partitions.topic_errors import PartitionNotFound, TopicNotFound
from broker.partitions.topics import TopicInfo, TopicRegistry, validate_topic_name
from broker.periodic import Periodic
from broker.streams.block_cache import DEFAULT_BLOCK_CACHE_BYTES, BlockCache
from broker.streams.log_cache import LogCache
from broker.streams.stream_reader import StreamReader
from broker.streams.upload_loop import UploadLoop
from broker.streams.uploader import DEFAULT_SO_THRESHOLD, upload_batch
from broker.streams.wal import Wal, WalRecord
from broker.streams.wal_trim import WalSlot, WalTrimTracker
from index_file import IndexEntry
from storage_tier import BlobStore, StorageUnavailable, open_store

log = logging.getLogger("mqindex.broker.node")

DEFAULT_UPLOAD_THRESHOLD = 32 << 20
DEFAULT_UPLOAD_INTERVAL_S = 2.0
DEFAULT_NAMESPACE = "_kafka_mqindex"
_FAR = 1 << 62


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(eq=False)
class Partition:
    """Runtime state of one partition on this node."""

    topic: TopicInfo
    index: int
    meta_stream: int
    data_stream: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    owned: bool = False
    epoch: int = -1
    next_offset: int = 0  # next Kafka offset to assign
    acked_end: int = 0  # offsets below are acknowledged (in the cache or in objects)
    meta_next: int = 0  # next offset of the meta stream
    state: PartitionState = field(default_factory=PartitionState)
    state_offset: int | None = None  # meta stream offset of the newest state record
    why_not_owned: str = "not opened"

    @property
    def name(self) -> str:
        return f"{self.topic.name}-{self.index}"


def decode_stream_record(body: bytes) -> StreamRecord:
    """A WAL body: one stream record in the object format (33-byte header + payload)."""
    if len(body) < RECORD_HEADER_SIZE:
        raise WalError(f"WAL body of {len(body)} bytes is shorter than a stream record header")
    magic, sid, epoch, base, count, plen = RECORD_HEADER.unpack_from(body, 0)
    if magic != RECORD_MAGIC or plen != len(body) - RECORD_HEADER_SIZE:
        raise WalError(f"WAL body is not a stream record (magic {magic}, payload {plen} of {len(body)} bytes)")
    return StreamRecord(sid, epoch, base, count, body[RECORD_HEADER_SIZE:])


def _out_message(topic: str, topic_id: int, partition: int, r: Record) -> OutMessage:
    return OutMessage(topic=topic, partition=partition, offset=r.offset,
                      msg_id=encode_message_id(topic_id, partition, r.offset), key=r.key, value=r.value,
                      headers=[(k, v if v is not None else b"") for k, v in r.headers], timestamp=r.timestamp_ms)


def _record_size(m: InMessage) -> int:
    return len(m.key or b"") + len(m.value or b"") + sum(len(k) + len(v or b"") for k, v in m.headers)


class BrokerNode:
    """Use `BrokerNode.open(...)`; implements api.backend.Backend."""

    def __init__(self, data_dir: Path, store: BlobStore, meta: MetadataClient, *, node_id: int,
                 upload_threshold: int, upload_interval_s: float, so_threshold: int,
                 retention: RetentionPolicy, maintenance_interval_s: float, block_cache_bytes: int,
                 max_cache_bytes: int, read_your_writes_s: float) -> None:
        self.data_dir = data_dir
        self.store = store
        self.meta = meta
        self.node_id = node_id
        self.so_threshold = so_threshold
        self.retention = retention
        self.max_cache_bytes = max_cache_bytes
        self.read_your_writes_s = read_your_writes_s
        self.registry = TopicRegistry(meta)
        self.cache = LogCache()
        self.block_cache = BlockCache(block_cache_bytes)
        self.reader = StreamReader(store, meta, self.cache, block_cache=self.block_cache)
        self.tracker = WalTrimTracker()
        self.round_robin = RoundRobin()
        self.wal: Wal
        self.index: Any  # IndexService
        self.dispatcher: Dispatcher
        self.uploader = UploadLoop(self._upload_once, lambda: self.cache.size, upload_threshold, upload_interval_s)
        self.maintenance = Periodic("broker-maintenance", maintenance_interval_s, self.run_maintenance)
        self._topics: dict[str, TopicInfo] = {}
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._by_stream: dict[int, Partition] = {}
        self._names_by_id: dict[int, str] = {}
        self._lock = threading.RLock()  # topics and partitions maps
        self._append_lock = threading.Lock()  # orders WAL appends with their trim slots
        self._upload_lock = threading.Lock()
        self._failed: BaseException | None = None
        self._closed = False
        self._lock_fd: int | None = None
        self.recovered_records = 0
        self.unclean_partitions: list[str] = []

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], store_url: str, metadata_url: str, node_id: int = 0,
             index_config: dict[str, Any] | None = None, upload_threshold: int = DEFAULT_UPLOAD_THRESHOLD,
             upload_interval_s: float = DEFAULT_UPLOAD_INTERVAL_S, *, so_threshold: int = DEFAULT_SO_THRESHOLD,
             retention_ms: int | None = None, retention_bytes: int | None = None,
             maintenance_interval_s: float = 30.0, namespace: str = DEFAULT_NAMESPACE,
             block_cache_bytes: int = DEFAULT_BLOCK_CACHE_BYTES, max_cache_bytes: int | None = None,
             read_your_writes_s: float = 5.0, wal_options: dict[str, int] | None = None) -> BrokerNode:
        """Open (recovering) the node whose local state is in `data_dir`: `wal/` and `index/` there, objects
        in `store_url`, controller metadata at `metadata_url` (sqlite:///... or postgresql://...).

        index_config: IndexService options (ServiceConfig fields; "store" overrides the index's store URL).
        Retention: None keeps data forever. read_your_writes_s: how long find_by_key waits for records
        acknowledged before it to be indexed."""
        d = Path(data_dir)
        d.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(d / "broker.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            raise RuntimeError(f"{d} is in use by another broker process") from None
        store = open_store(store_url)
        meta = MetadataClient(metadata_url, node_id, namespace)
        node = cls(d, store, meta, node_id=node_id, upload_threshold=upload_threshold,
                   upload_interval_s=upload_interval_s, so_threshold=so_threshold,
                   retention=RetentionPolicy(retention_ms, retention_bytes),
                   maintenance_interval_s=maintenance_interval_s, block_cache_bytes=block_cache_bytes,
                   max_cache_bytes=max_cache_bytes or max(4 * upload_threshold, 256 << 20),
                   read_your_writes_s=read_your_writes_s)
        node._lock_fd = lock_fd
        try:
            node._start(dict(index_config or {}), store_url, dict(wal_options or {}))
        except BaseException:
            node._abandon()
            raise
        return node

    def _abandon(self) -> None:
        """Release what a failed open took (no clean-shutdown work)."""
        for closer in (lambda: self.wal.close(), lambda: self.index.close(), self.meta.close, self.store.close):
            with contextlib.suppress(Exception):
                closer()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _start(self, index_config: dict[str, Any], store_url: str, wal_options: dict[str, int]) -> None:
        from index_service import IndexService

        started = time.monotonic()
        self.meta.register_node()
        self.wal = Wal.open(self.data_dir / "wal", **wal_options)
        recovered = [(w, decode_stream_record(w.body)) for w in self.wal.recovered]
        for name in self.registry.names():
            info = self.registry.get(name, refresh=False)
            if info is not None:
                self._add_topic(info)
        parts = list(self._partitions.values())
        self._claim(parts)
        self._restore_cache(recovered)
        for p in parts:
            if p.owned:
                self._load_state(p)
        if self.cache.size or len(self.tracker):
            self._upload_once()  # acknowledged records not yet in objects: commit them before serving
        index_store = index_config.pop("store", store_url)
        # each node's index files under their own prefix: an index service sweeps unclaimed objects under
        # its prefix, so nodes sharing a store must never share one
        index_config.setdefault("remote_prefix", f"index-node-{self.node_id}/")
        self.index = IndexService.open(self.data_dir / "index", store=index_store, **index_config)
        self.dispatcher = Dispatcher(self.index.put_batch, self._catch_up_entries, self.index.flush)
        catch_up = []
        owned = [p for p in parts if p.owned]
        for p in owned:
            ck = self.index.checkpoint(p.topic.name, p.index)
            start = max(0 if ck is None else ck + 1, self._start_offset(p))
            catch_up.append(CatchUp(p.topic.name, p.index, start, p.acked_end))
        self._write_states(owned, clean=False)
        self.dispatcher.start(catch_up)
        self.uploader.start()
        self.maintenance.start()
        log.info("broker node open", extra={
            "node_id": self.node_id, "node_epoch": self.meta.node_epoch, "partitions": len(parts),
            "owned": len(owned), "recovered_records": self.recovered_records,
            "unclean": len(self.unclean_partitions), "wal_stop_reason": self.wal.report.stop_reason,
            "seconds": round(time.monotonic() - started, 3)})

    def _add_topic(self, info: TopicInfo) -> list[Partition]:
        with self._lock:
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

    def _claim(self, parts: list[Partition]) -> None:
        """Open the meta and data streams of each partition no other node holds, at a new epoch."""
        if not parts:
            return
        self.meta.catch_up()
        stale = []
        for p in parts:
            for sid in (p.meta_stream, p.data_stream):
                s = self.meta.get_stream(sid, refresh=False)
                if s.state == OPENED and s.owner == self.node_id:
                    stale.append((sid, s.epoch))  # left by this node's previous incarnation
        if stale:
            self.meta.close_streams(stale)
        requests = []
        for p in parts:
            ms, ds = self.meta.get_stream(p.meta_stream, refresh=False), self.meta.get_stream(p.data_stream,
                                                                                               refresh=False)
            if OPENED in (ms.state, ds.state):
                owner = ds.owner if ds.state == OPENED else ms.owner
                p.owned, p.why_not_owned = False, f"opened by node {owner}"
                continue
            p.epoch = max(ms.epoch, ds.epoch) + 1
            requests += [(p.meta_stream, p.epoch), (p.data_stream, p.epoch)]
        results = self.meta.open_streams(requests) if requests else {}
        undo = []
        for p in parts:
            if p.meta_stream not in results:
                continue
            errs = [results[p.meta_stream], results[p.data_stream]]
            if errs == [None, None]:
                p.owned = True
                ds = self.meta.get_stream(p.data_stream, refresh=False)
                ms = self.meta.get_stream(p.meta_stream, refresh=False)
                p.next_offset = p.acked_end = ds.end_offset
                p.meta_next = ms.end_offset
                self.tracker.committed({p.data_stream: ds.end_offset, p.meta_stream: ms.end_offset})
            else:
                p.owned, p.why_not_owned = False, "; ".join(str(e) for e in errs if e is not None)
                undo += [(sid, p.epoch) for sid, e in zip((p.meta_stream, p.data_stream), errs, strict=True)
                         if e is None]
                log.warning("partition not opened", extra={"topic": p.topic.name, "partition": p.index,
                                                           "epoch": p.epoch, "reason": p.why_not_owned})
        if undo:
            self.meta.close_streams(undo)

    def _restore_cache(self, recovered: list[tuple[WalRecord, StreamRecord]]) -> None:
        """WAL records beyond each owned stream's committed end go back to the cache, at the new epoch."""
        for w, rec in recovered:
            self.tracker.add(WalSlot(rec.stream_id, rec.last_offset, w.next_offset))
            p = self._by_stream.get(rec.stream_id)
            if p is None or not p.owned:
                self.tracker.forget_stream(rec.stream_id)
                if p is not None and rec.last_offset > self.meta.get_stream(rec.stream_id, refresh=False).end_offset:
                    log.error("acknowledged WAL records of a partition another node owns are not restored",
                              extra={"topic": p.topic.name, "partition": p.index, "stream": rec.stream_id,
                                     "offset": rec.base_offset})
                continue
            is_meta = rec.stream_id == p.meta_stream
            end = p.meta_next if is_meta else p.next_offset
            if rec.last_offset <= end:
                continue  # already committed (or restored)
            if rec.base_offset != end:
                raise WalError(f"WAL recovery: stream {rec.stream_id} record at {rec.base_offset} does not continue "
                               f"the stream at {end}")
            self.cache.append(dataclasses.replace(rec, epoch=p.epoch))
            if is_meta:
                p.meta_next = rec.last_offset
            else:
                p.next_offset = p.acked_end = rec.last_offset
                self.recovered_records += rec.count

    def _load_state(self, p: Partition) -> None:
        ms = self.meta.get_stream(p.meta_stream, refresh=False)
        last = None
        if p.meta_next > ms.start_offset:
            for rec in self._read_stream(p.meta_stream, max(ms.start_offset, p.meta_next - 1), p.meta_next):
                last = rec
        if last is not None:
            p.state = PartitionState.decode(last.payload)
            p.state_offset = last.base_offset
            if not p.state.clean_shutdown:
                self.unclean_partitions.append(p.name)
        p.state = dataclasses.replace(p.state, start_offset=self._start_offset(p))

    def _start_offset(self, p: Partition) -> int:
        return self.meta.get_stream(p.data_stream, refresh=False).start_offset

    def _write_states(self, parts: list[Partition], clean: bool) -> None:
        futures = []
        for p in parts:
            if not p.owned:
                continue
            ck = self.index.checkpoint(p.topic.name, p.index)
            p.state = PartitionState(self._start_offset(p), clean, ck, self.node_id, p.epoch, _now_ms())
            with p.lock:
                rec = StreamRecord(p.meta_stream, p.epoch, p.meta_next, 1, p.state.encode())
                p.meta_next += 1
                p.state_offset = rec.base_offset
                futures.append(self._append(rec, p, None))
        for f in futures:
            f.result()

    # -- the WAL append path ----------------------------------------------------------------------
    def _append(self, rec: StreamRecord, p: Partition, entries: list[IndexEntry] | None) -> Future[Any]:
        """Queue the WAL append of `rec` (caller holds p.lock); on durability: cache, acked end, dispatch."""
        slot = WalSlot(rec.stream_id, rec.last_offset)
        body = encode_record(rec)
        with self._append_lock:
            fut = self.wal.append_async(body)
            self.tracker.add(slot)

        def durable(f: Future[Any]) -> None:
            exc = f.exception()
            if exc is not None:
                self._failed = self._failed or exc
                return
            slot.wal_next = f.result().next_offset
            try:
                self.cache.append(rec)
            except ValueError as e:  # a bug: fail loudly and stop acknowledging
                self._failed = e
                log.error("log cache append failed", extra={"stream": rec.stream_id, "offset": rec.base_offset,
                                                            "error": str(e)})
                return
            if rec.stream_id == p.data_stream:
                p.acked_end = rec.last_offset
                if entries:
                    self.dispatcher.enqueue(entries)
            self.uploader.notify(self.cache.size)

        fut.add_done_callback(durable)
        return fut

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the broker node is closed")
        if self._failed is not None:
            raise WalError(f"the broker node failed and acknowledges nothing more: {self._failed}")

    # -- topics ----------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> dict[str, Any]:
        self._check_usable()
        info = self.registry.create(name, partitions)
        parts = self._add_topic(info)
        self._claim(parts)
        self._write_states([p for p in parts if p.owned], clean=False)
        return info.as_dict()

    def list_topics(self) -> list[dict[str, Any]]:
        out = []
        for name in self.registry.names():
            with self._lock:
                info = self._topics.get(name)
            info = info or self.registry.get(name, refresh=False)
            if info is not None:
                out.append(info.as_dict())
        return out

    def _topic(self, name: str) -> TopicInfo:
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
        parts = self._add_topic(info)
        if parts and not self._closed:
            self._claim(parts)  # created by another node: take the partitions nobody holds
            self._write_states([p for p in parts if p.owned], clean=False)
        return info

    def _partition(self, info: TopicInfo, partition: object, field_name: str = "partition") -> Partition:
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise InvalidField(field_name, f"must be an integer, got {partition!r}")
        if not 0 <= partition < info.partitions:
            raise PartitionNotFound(info.name, partition, info.partitions)
        return self._partitions[(info.name, partition)]

    # -- produce ---------------------------------------------------------------------------------
    def produce(self, topic: str, messages: list[InMessage]) -> list[Produced]:
        """Append every message (one batch per partition); returns once all are fsynced in the WAL."""
        self._check_usable()
        info = self._topic(topic)
        if not isinstance(messages, list) or not messages:
            raise InvalidField("messages", "must be a non-empty list")
        groups: dict[int, list[int]] = {}
        for i, m in enumerate(messages):
            self._validate_message(i, m)
            if m.partition is not None:
                p = m.partition
                self._partition(info, p, f"messages.{i}.partition")
            elif m.key is not None:
                p = partition_for_key(m.key, info.partitions)
            else:
                p = self.round_robin.next(info.name, info.partitions)
            groups.setdefault(p, []).append(i)
        for pi in groups:
            part = self._partitions[(info.name, pi)]
            if not part.owned:
                raise NotOwner(f"partition {part.name} is not served by node {self.node_id}: {part.why_not_owned}")
        self._wait_for_cache_room()
        now = _now_ms()
        pending = []
        for pi, idxs in groups.items():
            part = self._partitions[(info.name, pi)]
            msgs = [messages[i] for i in idxs]
            batch = build_batch([ProducerRecord(m.value, m.key, list(m.headers), now) for m in msgs])
            if len(batch) + RECORD_HEADER_SIZE > self.wal.max_body:
                raise InvalidField("messages", f"{len(batch)} bytes for partition {pi} in one request exceed "
                                               f"the {self.wal.max_body}-byte limit")
            keys = [index_keys(ProducerRecord(m.value, m.key, list(m.headers), now)) for m in msgs]
            with part.lock:
                if not part.owned:
                    raise NotOwner(f"partition {part.name} is no longer served by node {self.node_id}")
                base = part.next_offset
                entries = [IndexEntry(info.name, pi, base + j, _record_size(m), now, k)
                           for j, (m, k) in enumerate(zip(msgs, keys, strict=True)) if k]
                rec = StreamRecord(part.data_stream, part.epoch, base, len(msgs), with_base_offset(batch, base))
                fut = self._append(rec, part, entries)
                part.next_offset = base + len(msgs)
            pending.append((fut, pi, base, idxs))
        results: list[Produced | None] = [None] * len(messages)
        for fut, pi, base, idxs in pending:
            fut.result()
            for j, i in enumerate(idxs):
                results[i] = Produced(pi, base + j, encode_message_id(info.topic_id, pi, base + j), now)
        if self._failed is not None:
            raise WalError(f"the broker node failed: {self._failed}")
        return results  # type: ignore[return-value]

    @staticmethod
    def _validate_message(i: int, m: object) -> None:
        if not isinstance(m, InMessage):
            raise InvalidField(f"messages.{i}", f"must be an InMessage, got {type(m).__name__}")
        for name, v in (("value", m.value), ("key", m.key)):
            if v is not None and not isinstance(v, bytes):
                raise InvalidField(f"messages.{i}.{name}", "must be bytes or null")
        for h in m.headers:
            if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str) and isinstance(h[1], bytes)):
                raise InvalidField(f"messages.{i}.headers", "must be (name, bytes) pairs")

    def _wait_for_cache_room(self, timeout: float = 30.0) -> None:
        if self.cache.size <= self.max_cache_bytes:
            return
        self.uploader.notify(self.cache.size)
        deadline = time.monotonic() + timeout
        while self.cache.size > self.max_cache_bytes:
            if time.monotonic() > deadline:
                raise StorageUnavailable("broker", None, f"log cache holds {self.cache.size} bytes not yet uploaded "
                                                         f"(limit {self.max_cache_bytes}); object storage is behind")
            time.sleep(0.01)

    # -- upload ----------------------------------------------------------------------------------
    def _upload_once(self) -> int:
        """Upload everything cached, commit, drop it from the cache, trim the WAL. Returns bytes uploaded."""
        with self._upload_lock:
            total = 0
            for _ in range(3):
                snap = self.cache.snapshot()
                snap = {sid: recs for sid, recs in snap.items() if self._owned_stream(sid)}
                if not snap:
                    break
                try:
                    res = upload_batch(snap, self.store, self.meta, so_threshold=self.so_threshold)
                except Fenced as exc:
                    self._after_fenced(list(snap), exc)
                    continue
                self.cache.mark_uploaded(res.uploaded)
                self.tracker.committed(res.uploaded)
                total += sum(len(r.payload) for recs in snap.values() for r in recs)
                log.debug("uploaded", extra={"streams": len(snap), "bytes": total,
                                             "stream_objects": [o.object_id for o in res.stream_objects],
                                             "object": res.stream_set_object.object_id
                                             if res.stream_set_object else None})
                break
            point = self.tracker.trim_point()
            if point is not None and point > self.wal.trim_offset:
                self.wal.trim(point)
            return total

    def _owned_stream(self, sid: int) -> bool:
        p = self._by_stream.get(sid)
        return p is not None and p.owned

    def _after_fenced(self, sids: list[int], exc: Exception) -> None:
        """A commit was fenced: find which streams this node lost and stop serving them."""
        self.meta.catch_up()
        node = self.meta.image.nodes.get(self.node_id)
        node_fenced = node is None or node.epoch != self.meta.node_epoch
        if node_fenced:  # a newer incarnation of this node registered: every partition is lost
            with self._lock:
                sids = sids + [p.data_stream for p in self._partitions.values() if p.owned]
        for sid in sids:
            p = self._by_stream.get(sid)
            if p is None or not p.owned:
                continue
            s = self.meta.get_stream(sid, refresh=False)
            if node_fenced or s.epoch != p.epoch or s.owner != self.node_id or s.state != OPENED:
                with p.lock:
                    p.owned, p.why_not_owned = False, f"fenced: {exc}"
                for lost in (p.meta_stream, p.data_stream):
                    self.cache.mark_uploaded({lost: _FAR})
                    self.tracker.forget_stream(lost)
                log.error("partition fenced: another owner holds its streams", extra={
                    "topic": p.topic.name, "partition": p.index, "stream": sid, "epoch": p.epoch,
                    "current_epoch": s.epoch, "owner": s.owner, "error": str(exc)})

    def flush(self, timeout: float = 120.0) -> None:
        """Upload what the cache holds now (tests and benchmarks; the uploader does it on its own)."""
        self.uploader.upload_now(timeout)

    def sync_index(self, timeout: float = 60.0) -> None:
        """Wait until every record acknowledged so far is in the index and queryable."""
        self.dispatcher.wait_idle(timeout)

    # -- reads -----------------------------------------------------------------------------------
    def _read_stream(self, sid: int, start: int, end: int, max_bytes: int = 1 << 20) -> Iterator[StreamRecord]:
        """Stream records covering [start, end), in order (cache, block cache, objects)."""
        pos = start
        misses = 0
        while pos < end:
            recs = self.reader.read(sid, pos, end, max_bytes)
            recs = [r for r in recs if r.last_offset > pos]
            if not recs:
                misses += 1  # an upload moved data from the cache to objects between two looks
                if misses > 3:
                    return
                continue
            misses = 0
            for r in recs:
                if r.base_offset > pos:
                    log.error("gap in stream", extra={"stream": sid, "offset": pos, "next": r.base_offset})
                    return
                yield r
                pos = r.last_offset

    def _bounds(self, p: Partition) -> tuple[int, int]:
        if p.owned:
            return self._start_offset(p), p.acked_end
        s = self.meta.get_stream(p.data_stream)
        return s.start_offset, s.end_offset

    def _records(self, p: Partition, start: int, end: int) -> Iterator[Record]:
        try:
            yield from parsed_records(self.reader, p.data_stream, self._read_stream(p.data_stream, start, end),
                                      start, end)
        except OffsetOutOfRange:
            return  # trimmed by retention meanwhile

    def fetch(self, topic: str, partition: int, offset: int, max_count: int) -> tuple[list[OutMessage], int]:
        info = self._topic(topic)
        p = self._partition(info, partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidField("offset", f"must be a non-negative integer, got {offset!r}")
        if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
            raise InvalidField("max", f"must be a positive integer, got {max_count!r}")
        start, end = self._bounds(p)
        pos = max(offset, start)
        out: list[OutMessage] = []
        if pos < end:
            for r in served_before_damage(self._records(p, pos, min(end, pos + max_count))):
                out.append(_out_message(info.name, info.topic_id, p.index, r))
        next_offset = out[-1].offset + 1 if out else (pos if offset < end else offset)
        return out, next_offset

    def _message_at(self, info: TopicInfo, partition: int, offset: int) -> OutMessage | None:
        if not 0 <= partition < info.partitions:
            return None
        p = self._partitions[(info.name, partition)]
        start, end = self._bounds(p)
        if not start <= offset < end:
            return None
        for r in self._records(p, offset, offset + 1):
            if r.offset == offset:
                return _out_message(info.name, info.topic_id, partition, r)
        return None

    def get_by_id(self, msg_id: str) -> OutMessage | None:
        mid = decode_message_id(msg_id)
        with self._lock:
            name = self._names_by_id.get(mid.topic_id)
        if name is None:
            name = self.registry.name_of(mid.topic_id)
            if name is None:
                return None
        try:
            info = self._topic(name)
        except TopicNotFound:
            return None
        if info.topic_id != mid.topic_id:
            return None
        return self._message_at(info, mid.partition, mid.offset)

    def find_by_key(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                    cursor: str | None) -> tuple[list[OutMessage], str | None]:
        info = self._topic(topic)
        if not isinstance(key, str) or not key:
            raise InvalidField("key", "must be a non-empty string")
        if isinstance(begin_ms, bool) or not isinstance(begin_ms, int) or begin_ms < 0:
            raise InvalidField("begin", f"must be a non-negative integer, got {begin_ms!r}")
        if end_ms is not None and (isinstance(end_ms, bool) or not isinstance(end_ms, int) or end_ms < begin_ms):
            raise InvalidField("end", f"must be an integer at or after begin ({begin_ms}), got {end_ms!r}")
        try:
            self.dispatcher.wait_idle(self.read_your_writes_s)  # what was acknowledged before is findable
        except TimeoutError:
            log.warning("index lags: lookup answers from what is indexed", extra={"topic": topic})

        def query(ask: int, end: int | None) -> list[Any]:
            return self.index.query(info.name, key, ask, begin_ms, end)

        return find_by_key(query, lambda part, off: self._message_at(info, part, off),
                           lambda m: key in index_keys(m), end_ms, max_count, cursor)  # type: ignore[arg-type]

    def _catch_up_entries(self, c: CatchUp) -> Iterator[list[IndexEntry]]:
        """Index entries of [c.start, c.end) of one partition, read back from the stream (re-dispatch)."""
        p = self._partitions[(c.topic, c.partition)]
        batch: list[IndexEntry] = []
        for r in self._records(p, c.start, c.end):
            keys = index_keys(r)
            if keys:
                size = len(r.key or b"") + len(r.value or b"") + sum(len(k) + len(v or b"") for k, v in r.headers)
                batch.append(IndexEntry(c.topic, c.partition, r.offset, size, r.timestamp_ms, keys))
                if len(batch) >= 4096:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def index_files(self) -> list[dict[str, Any]]:
        out = []
        for f in self.index.files():
            state = f.state.value if hasattr(f.state, "value") else str(f.state)
            out.append({"state": state, "begin_ms": f.begin_ms,
                        "end_ms": f.end_ms if f.end_ms is not None else f.begin_ms,
                        "items": f.items, "location": f.location})
        return out

    # -- retention and cleanup -------------------------------------------------------------------
    def run_maintenance(self, now_ms: int | None = None) -> dict[str, Any]:
        """One pass: retention trims, meta-stream trims, expired/destroyed object cleanup."""
        now = _now_ms() if now_ms is None else now_ms
        trimmed: dict[str, int] = {}
        with self._lock:
            parts = [p for p in self._partitions.values() if p.owned]
        self.meta.catch_up()
        for p in parts:
            try:
                if self.retention.active:
                    cached = sum(len(r.payload) for r in (self.cache.read(p.data_stream, 0, _FAR) or []))
                    new_start = retention_start(self.meta, self.reader, p.data_stream, cached, self.retention, now)
                    if new_start > self._start_offset(p):
                        self.meta.trim_stream(p.data_stream, p.epoch, new_start)
                        trimmed[p.name] = new_start
                        log.info("retention trimmed", extra={"topic": p.topic.name, "partition": p.index,
                                                             "stream": p.data_stream, "start_offset": new_start})
                ms = self.meta.get_stream(p.meta_stream, refresh=False)
                if p.state_offset is not None and ms.start_offset < p.state_offset < ms.end_offset:
                    self.meta.trim_stream(p.meta_stream, p.epoch, p.state_offset)
            except Fenced as exc:
                self._after_fenced([p.data_stream], exc)
        if trimmed:
            self._write_states([self._partitions[(p.topic.name, p.index)] for p in parts if p.name in trimmed],
                               clean=False)
        cleaned = self.meta.cleanup_objects(self.store, now_ms=max(now, _now_ms()))
        if cleaned.deleted or cleaned.expired:
            log.info("objects cleaned up", extra={"deleted": cleaned.deleted, "expired": cleaned.expired})
        return {"trimmed": trimmed, "deleted": cleaned.deleted, "expired": cleaned.expired}

    # -- introspection ---------------------------------------------------------------------------
    def partition_info(self, topic: str, partition: int) -> dict[str, Any]:
        info = self._topic(topic)
        p = self._partition(info, partition)
        start, end = self._bounds(p)
        return {"topic": info.name, "partition": p.index, "owned": p.owned, "epoch": p.epoch,
                "meta_stream": p.meta_stream, "data_stream": p.data_stream, "start_offset": start,
                "end_offset": end, "state": dataclasses.asdict(p.state)}

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Clean shutdown: upload the cache, mark clean shutdown, close streams, close the index."""
        if self._closed:
            return
        self._closed = True
        self.maintenance.stop()
        clean = self._failed is None
        try:
            self.uploader.upload_now()
        except Exception as exc:  # noqa: BLE001 - the WAL keeps the data; the next open recovers it
            clean = False
            log.error("final upload failed; the WAL keeps the records", extra={"error": str(exc)})
        self.uploader.stop()
        self.dispatcher.stop()
        with self._lock:
            owned = [p for p in self._partitions.values() if p.owned]
        try:
            self.index.flush()
            if clean:
                self._write_states(owned, clean=True)
                self._upload_once()
                for p in owned:
                    ms = self.meta.get_stream(p.meta_stream, refresh=False)
                    if p.state_offset is not None and ms.start_offset < p.state_offset < ms.end_offset:
                        self.meta.trim_stream(p.meta_stream, p.epoch, p.state_offset)
                clean = self.cache.size == 0
        except Exception as exc:  # noqa: BLE001
            clean = False
            log.error("clean shutdown incomplete; the next open recovers", extra={"error": str(exc)})
        self.wal.close()
        if clean and owned:
            try:
                self.meta.close_streams([(sid, p.epoch) for p in owned for sid in (p.meta_stream, p.data_stream)])
            except Exception as exc:  # noqa: BLE001
                log.error("closing streams failed", extra={"error": str(exc)})
        self.index.close()
        self.meta.close()
        self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("broker node closed", extra={"node_id": self.node_id, "clean": clean, "partitions": len(owned)})

    def __enter__(self) -> BrokerNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
