"""BrokerNode: one broker process, composed of its layers; wiring, threads and lifecycle only.

    node = BrokerNode.open(data_dir, store_url, metadata_url, node_id=0, index_config=None)
    node.create_topic("orders", 3); node.produce("orders", [InMessage(b"v", key=b"k")])
    node.fetch(...); node.get_by_id(msg_id); node.find_by_key(...); node.index_files()
    node.close()

It implements api.backend.Backend. The layers it wires (docs/ARCHITECTURE.md):
- broker/streams: StreamStorage (WAL, log cache, block cache, uploader thread) and its Streams;
- broker/partitions: PartitionMap (topics, partitions, claim at a new epoch, state records), Producer,
  reads, key lookup, retention, and the Dispatcher that feeds the IndexService;
- index_service: the node's IndexService under `index/`, its files under `index-node-N/` in the store.

The order of opening and closing, and the walk of a record through the layers, are in
docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker import overview  # the console's read-only views
from broker.cluster.cluster import Cluster
from broker.cluster.membership import DEFAULT_LEASE_MS
from broker.compaction import CompactionConfig, Compactor
from broker.metadata import MetadataClient
from broker.partitions import reads, topic_admin
from broker.partitions.client_messages import InMessage, OutMessage, Produced
from broker.partitions.dispatcher import CatchUp, Dispatcher
from broker.partitions.key_lookup import check_key_query, find_by_key
from broker.partitions.partition_map import PartitionMap
from broker.partitions.partition_map import now_ms as _now_ms
from broker.partitions.produce import Producer
from broker.partitions.records import index_keys
from broker.partitions.retention import RetentionPolicy, apply_retention, data_is_live
from broker.periodic import Periodic
from broker.streams import StreamStorage
from broker.streams.block_cache import DEFAULT_BLOCK_CACHE_BYTES
from broker.streams.disk_space import tolerate_out_of_disk, watch_data_paths
from broker.streams.uploader import DEFAULT_SO_THRESHOLD
from index_service import IndexOutOfSpace
from storage_tier import BlobStore, open_store

log = logging.getLogger("mqindex.broker.node")

DEFAULT_UPLOAD_THRESHOLD = 32 << 20
DEFAULT_UPLOAD_INTERVAL_S = 2.0
DEFAULT_NAMESPACE = "_kafka_mqindex"


class BrokerNode:
    """Use `BrokerNode.open(...)`; implements api.backend.Backend."""

    def __init__(self, data_dir: Path, store: BlobStore, meta: MetadataClient, *, node_id: int,
                 retention: RetentionPolicy, maintenance_interval_s: float, read_your_writes_s: float) -> None:
        self.data_dir = data_dir
        self.store = store
        self.meta = meta
        self.node_id = node_id
        self.retention = retention
        self.read_your_writes_s = read_your_writes_s
        self.maintenance = Periodic("broker-maintenance", maintenance_interval_s, self.run_maintenance)
        self.storage: StreamStorage
        self.partitions: PartitionMap
        self.producer: Producer
        self.index: Any  # IndexService
        self.dispatcher: Dispatcher
        self._closed = False
        self.clock: Callable[[], int] = _now_ms
        self.settings: dict[str, Any] = {}
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
             read_your_writes_s: float = 5.0, wal_options: dict[str, int] | None = None,
             http_address: str | None = None, lease_ms: int = DEFAULT_LEASE_MS,
             cluster_token: str | None = None, clock: Callable[[], int] | None = None,
             compaction: CompactionConfig | None = None, min_free_bytes: int | None = None) -> BrokerNode:
        """Open (recovering) the node whose local state is in `data_dir`: `wal/` and `index/` there, objects
        in `store_url`, controller metadata at `metadata_url` (sqlite:///... or postgresql://...).

        index_config: IndexService options (ServiceConfig fields; "store" overrides the index's store URL).
        Retention: the server default for topics without `retention.ms` / `retention.bytes`; None keeps
        data forever. read_your_writes_s: how long find_by_key waits for records acknowledged before it to
        be indexed. clock: milliseconds (append time, retention, the index); tests inject one.
        http_address: where the other nodes reach this one (its advertised HTTP URL); lease_ms: how long this
        node stays alive for the others without a heartbeat; cluster_token: the bearer token this node presents
        to the others. min_free_bytes: the free-space floor of the data paths (None: 1% of each
        filesystem or 256 MiB, whichever is smaller; see broker/streams/disk_space.py)."""
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
        node = cls(d, store, meta, node_id=node_id, retention=RetentionPolicy(retention_ms, retention_bytes),
                   maintenance_interval_s=maintenance_interval_s, read_your_writes_s=read_your_writes_s)
        node._lock_fd = lock_fd
        node.clock = clock or _now_ms
        node.settings = dict(  # the effective values, for GET /v1/config
            node_id=node_id, namespace=namespace, upload_threshold=upload_threshold,
            upload_interval_s=upload_interval_s, so_threshold=so_threshold, retention_ms=retention_ms,
            retention_bytes=retention_bytes, maintenance_interval_s=maintenance_interval_s,
            block_cache_bytes=block_cache_bytes,
            max_cache_bytes=max_cache_bytes or max(4 * upload_threshold, 256 << 20),
            read_your_writes_s=read_your_writes_s)
        node.compactor = Compactor(store, meta, compaction)  # broker/compaction: started with the other threads
        node.compaction = Periodic("broker-compaction", node.compactor.config.interval_s, node.compactor.run_once)
        try:
            node._start(dict(index_config or {}), store_url, dict(http=http_address, lease_ms=lease_ms,
                                                                   token=cluster_token), dict(
                upload_threshold=upload_threshold, upload_interval_s=upload_interval_s, so_threshold=so_threshold,
                block_cache_bytes=block_cache_bytes,
                max_cache_bytes=max_cache_bytes or max(4 * upload_threshold, 256 << 20),
                wal_options=dict(wal_options or {}), min_free_bytes=min_free_bytes))
        except BaseException:
            node._abandon()
            raise
        return node

    def _abandon(self) -> None:
        """Release what a failed open took (no clean-shutdown work)."""
        for closer in (lambda: self.cluster.stop(), lambda: self.storage.close(), lambda: self.index.close(),
                       self.meta.close, self.store.close):
            with contextlib.suppress(Exception):
                closer()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _start(self, index_config: dict[str, Any], store_url: str, cluster_options: dict[str, Any],
               storage_options: dict[str, Any]) -> None:
        from index_service import IndexService

        started = time.monotonic()
        self.meta.register_node()
        self.storage = StreamStorage.open(self.data_dir / "wal", self.store, self.meta, **storage_options)
        watch_data_paths(self.storage.disk, self.data_dir / "index", self.store)
        self.partitions = parts = PartitionMap(self.meta, self.storage, self.node_id)
        self.cluster = Cluster(parts, self.meta, self.meta.url, self.node_id, **cluster_options)
        self.cluster.start_membership()
        every = parts.load_all()
        self.cluster.claim_at_open(every)
        restored = self.storage.restore_from_wal()
        self.recovered_records = sum(restored.get(p.data_stream, 0) for p in every)
        parts.load_states(every)
        self.unclean_partitions = parts.unclean
        if self.storage.has_unuploaded:
            # acknowledged records not yet in objects: commit them before serving (out of disk: the uploader
            # retries once space returns; the cache and the WAL hold them meanwhile)
            tolerate_out_of_disk(self.storage.force_upload, "upload of recovered records")
        index_store = index_config.pop("store", store_url)
        # each node's index files under their own prefix: an index service sweeps unclaimed objects under
        # its prefix, so nodes sharing a store must never share one
        index_config.setdefault("remote_prefix", f"index-node-{self.node_id}/")
        index_config.setdefault("clock", self.clock)
        # the index follows the data: a file expires once the broker has trimmed every range in it
        index_config.setdefault("is_live", lambda t, q, off: data_is_live(parts, t, q, off))
        self.index = IndexService.open(self.data_dir / "index", store=index_store, **index_config)
        parts.checkpoint = self.index.checkpoint
        self.dispatcher = Dispatcher(self.index.put_batch, lambda c: reads.index_entries(
            parts, c.topic, c.partition, c.start, c.end, self.clock), self.index.flush)
        self.producer = Producer(parts, self.storage.wal.max_body, self.dispatcher.enqueue, self.clock)
        owned = parts.owned()
        catch_up = []
        for p in owned:
            ck = self.index.checkpoint(p.topic.name, p.index)
            start = max(0 if ck is None else ck + 1, parts.start_offset(p))
            catch_up.append(CatchUp(p.topic.name, p.index, start, p.acked_end))
        tolerate_out_of_disk(lambda: parts.write_states(owned, clean=False), "state records")
        self.dispatcher.start(catch_up)
        self.cluster.start(self.index, self.dispatcher)
        self.storage.start()
        self.maintenance.start()
        self.compaction.start()
        log.info("broker node open", extra={
            "node_id": self.node_id, "node_epoch": self.meta.node_epoch, "partitions": len(every),
            "owned": len(owned), "recovered_records": self.recovered_records,
            "unclean": len(self.unclean_partitions), "wal_stop_reason": self.storage.wal.report.stop_reason,
            "seconds": round(time.monotonic() - started, 3)})

    # -- the layers' parts, for tests, benchmarks and metrics --------------------------------------
    wal = property(lambda self: self.storage.wal)
    cache = property(lambda self: self.storage.cache)
    block_cache = property(lambda self: self.storage.block_cache)
    reader = property(lambda self: self.storage.reader)
    uploader = property(lambda self: self.storage.uploader)

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError("the broker node is closed")
        self.storage.check_usable()

    # -- topics ----------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: dict[str, int] | None = None) -> dict[str, Any]:
        self._check_usable()
        return self.cluster.create_topic(name, partitions, configs).as_dict()

    def describe_topic(self, name: str) -> dict[str, Any]:
        return topic_admin.describe(self.partitions, name, self.retention)

    def alter_topic_configs(self, name: str, change: dict[str, int | None]) -> dict[str, Any]:
        self._check_usable()
        self.partitions.registry.alter_configs(name, change)
        return self.describe_topic(name)

    def effective_config(self) -> dict[str, Any]:
        return topic_admin.effective_config(self.settings, self.index.config)

    def list_topics(self) -> list[dict[str, Any]]:
        return [info.as_dict() for info in self.partitions.list_topics()]

    # -- produce and reads -------------------------------------------------------------------------
    def produce(self, topic: str, messages: list[InMessage]) -> list[Produced]:
        """Append every message (one batch per partition); returns once all are fsynced in the WAL."""
        self._check_usable()
        return self.producer.produce(self.partitions.topic(topic), messages, self.node_id)

    def fetch(self, topic: str, partition: int, offset: int, max_count: int) -> tuple[list[OutMessage], int]:
        return reads.fetch(self.partitions, topic, partition, offset, max_count)

    def get_by_id(self, msg_id: str) -> OutMessage | None:
        return reads.get_by_id(self.partitions, msg_id)

    def find_by_key(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                    cursor: str | None) -> tuple[list[OutMessage], str | None]:
        info = self.partitions.topic(topic)
        check_key_query(key, begin_ms, end_ms)
        try:
            self.dispatcher.wait_idle(self.read_your_writes_s)  # what was acknowledged before is findable
        except (TimeoutError, IndexOutOfSpace):
            log.warning("index lags: lookup answers from what is indexed", extra={"topic": topic})

        def query(ask: int, end: int | None) -> list[Any]:
            return self.cluster.query(info.name, key, ask, begin_ms, end)

        return find_by_key(query, lambda part, off: reads.message_at(self.partitions, info, part, off),
                           lambda m: key in index_keys(m), end_ms, max_count, cursor)  # type: ignore[arg-type]

    def index_files(self) -> list[dict[str, Any]]:
        out = []
        for f in self.index.files():
            state = f.state.value if hasattr(f.state, "value") else str(f.state)
            out.append({"state": state, "begin_ms": f.begin_ms,
                        "end_ms": f.end_ms if f.end_ms is not None else f.begin_ms,
                        "items": f.items, "location": f.location})
        return out

    def local_index_query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int | None
                          ) -> list[Any]:
        """This node's own index only (what the other nodes ask for a cluster-wide lookup)."""
        try:
            self.dispatcher.wait_idle(self.read_your_writes_s)
        except TimeoutError:
            log.warning("index lags: lookup answers from what is indexed", extra={"topic": topic})
        return self.index.query(topic, key, max_count, begin_ms, end_ms)

    # -- cluster ------------------------------------------------------------------------------------
    def cluster_nodes(self) -> list[dict[str, Any]]:
        return self.cluster.nodes()

    def reassign(self, topic: str, partition: int, target: int) -> dict[str, Any]:
        self._check_usable()
        return self.cluster.reassign(topic, partition, target)

    def rebalance(self, execute: bool) -> dict[str, Any]:
        moves = self.cluster.rebalance_plan()
        names = {p.topic.topic_id: p.topic.name for p in self.partitions.all()}
        plan = [{"topic": names[m.topic_id], "partition": m.partition, "from": m.source, "to": m.target}
                for m in moves]
        done = [self.cluster.reassign(m["topic"], m["partition"], m["to"]) for m in plan] if execute else []
        return {"plan": plan, "executed": done}

    def flush(self, timeout: float = 120.0) -> None:
        """Upload what the cache holds now (tests and benchmarks; the uploader does it on its own)."""
        self.storage.flush(timeout)

    def sync_index(self, timeout: float = 60.0) -> None:
        """Wait until every record acknowledged so far is in the index and queryable."""
        self.dispatcher.wait_idle(timeout)

    # -- retention and cleanup -------------------------------------------------------------------
    def run_maintenance(self, now_ms: int | None = None) -> dict[str, Any]:
        """One pass: retention trims, meta-stream trims, expired/destroyed object cleanup."""
        now = self.clock() if now_ms is None else now_ms
        trimmed = apply_retention(self.partitions, self.retention, now)
        self.cluster.publish_index_files(self.index_files())
        cleaned = self.meta.cleanup_objects(self.store, now_ms=max(now, _now_ms()))
        self.meta.maybe_snapshot()  # the metadata log truncated behind a snapshot (broker/metadata/snapshot.py)
        if cleaned.deleted or cleaned.expired:
            log.info("objects cleaned up", extra={"deleted": cleaned.deleted, "expired": cleaned.expired})
        return {"trimmed": trimmed, "deleted": cleaned.deleted, "expired": cleaned.expired}

    def compact(self) -> dict[str, Any]:
        """Run one compaction cycle now (admin endpoint, `mqindex compact --now`); what it did."""
        return {**self.compactor.run_once().as_dict(), **self.compactor.object_counts()}

    # -- introspection ---------------------------------------------------------------------------
    def partition_info(self, topic: str, partition: int) -> dict[str, Any]:
        return self.partitions.describe(topic, partition)

    # -- the console: read-only views (broker/overview.py) ------------------------------------------
    def partitions_overview(self, topic: str | None = None) -> list[dict[str, Any]]:
        return overview.partitions(self.partitions, self.meta, topic)

    def objects_overview(self) -> dict[str, Any]:
        last = self.compactor.totals.last
        return overview.objects(self.meta) | {"compaction": self.compactor.totals.snapshot() | {
            "last": None if last is None else last.as_dict()}}

    def node_overview(self) -> dict[str, Any]:
        episode = self.storage.disk.episode
        return {"node_id": self.node_id, "wal_bytes_not_uploaded": self.storage.cache.size,
                "out_of_disk": None if episode is None else episode.path,
                "failed": None if self.storage.failed is None else str(self.storage.failed)}

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Clean shutdown: upload the cache, mark clean shutdown, close streams, close the index."""
        if self._closed:
            return
        self._closed = True
        self.maintenance.stop()
        self.compaction.stop()
        try:
            if self.cluster.drain() or self.cluster.others_alive():
                # leaving a cluster: every index file uploaded and published, so any node reads them
                self.dispatcher.wait_idle(60.0)
                self.index.roll()
                self.index.maintain()
                self.cluster.publish_index_files(self.index_files())
        except Exception as exc:  # noqa: BLE001 - the node still closes cleanly; the others take over later
            log.error("leaving the cluster incompletely", extra={"node_id": self.node_id, "error": str(exc)})
        self.cluster.stop()
        self.partitions.closed = True
        clean = self.storage.failed is None and self.storage.disk.episode is None  # out of disk: the WAL keeps it
        try:
            self.storage.flush()
        except Exception as exc:  # noqa: BLE001 - the WAL keeps the data; the next open recovers it
            clean = False
            log.error("final upload failed; the WAL keeps the records", extra={"error": str(exc)})
        self.storage.stop()
        self.dispatcher.stop()
        owned = self.partitions.owned()
        try:
            self.index.flush()
            if clean:
                self.partitions.write_states(owned, clean=True)
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
