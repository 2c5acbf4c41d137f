"""BrokerNode: one broker process, composed of its layers; wiring, threads and lifecycle only.

    node = BrokerNode.open(data_dir, store_url, metadata_url, node_id=0)
    node.create_topic("orders", 3); node.produce("orders", [InMessage(b"v", key=b"k")]); node.close()

It implements api.backend.Backend over broker/cluster (leases, leaders, moves, lookups across nodes),
broker/partitions, broker/compaction, broker/streams and the node's IndexService. docs/ARCHITECTURE.md
has the layers, the order of opening and closing, and the walk of a record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker import overview  # the console's read-only views
from broker.cluster.balancer import BalanceConfig, balance_settings
from broker.cluster.cluster import Cluster
from broker.cluster.cluster_index import index_file_rows
from broker.cluster.failover import failover_reports, replayed_elsewhere
from broker.cluster.failover_history import FAILOVER_HISTORY_PER_NODE
from broker.cluster.key_lookup import NodeLookups
from broker.cluster.membership import DEFAULT_LEASE_MS, TIMED_STREAM_RECORDS, Membership
from broker.compaction import CompactionConfig, Compactor
from broker.data_dir_identity import check_identity
from broker.errors import NodeClosed
from broker.metadata import MetadataClient
from broker.metadata.leases import LeaseTable
from broker.partitions import reads, topic_admin, topic_config
from broker.partitions.client_messages import InMessage, OutMessage, Produced
from broker.partitions.dispatcher import Dispatcher
from broker.partitions.index_link import catch_up_ranges, keyless_ends, open_index
from broker.partitions.kafka_clients.client_batches import ClientBatches
from broker.partitions.message_size import TopicLimits
from broker.partitions.partition_map import PartitionMap
from broker.partitions.partition_map import now_ms as _now_ms
from broker.partitions.produce import Producer
from broker.partitions.retention import RetentionPolicy, apply_retention
from broker.periodic import Periodic
from broker.streams import StreamStorage
from broker.streams.block_cache import DEFAULT_BLOCK_CACHE_BYTES
from broker.streams.disk_space import tolerate_out_of_disk, watch_data_paths
from broker.streams.uploader import DEFAULT_SO_THRESHOLD
from storage_tier import BlobStore, open_store

log = logging.getLogger("mqindex.broker.node")

DEFAULT_UPLOAD_THRESHOLD = 32 << 20
DEFAULT_UPLOAD_INTERVAL_S = 2.0
DEFAULT_NAMESPACE = "_kafka_mqindex"


class BrokerNode:
    """Use `BrokerNode.open(...)`; implements api.backend.Backend."""

    def __init__(self, data_dir: Path, store: BlobStore, meta: MetadataClient, *, node_id: int,
                 retention: RetentionPolicy, maintenance_interval_s: float, read_your_writes_s: float,
                 message_max_bytes: int = topic_config.DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.data_dir = data_dir
        self.store = store
        self.meta = meta
        self.node_id = node_id
        self.retention = retention
        self.message_max_bytes = message_max_bytes  # max.message.bytes of the topics that set none
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
        self._wal_store: BlobStore | None = None
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
             http_address: str | None = None, kafka_address: str | None = None, lease_ms: int = DEFAULT_LEASE_MS,
             cluster_token: str | None = None, clock: Callable[[], int] | None = None,
             compaction: CompactionConfig | None = None, min_free_bytes: int | None = None,
             wal_url: str | None = None, metadata_options: dict[str, Any] | None = None,
             failover_history_per_node: int = FAILOVER_HISTORY_PER_NODE,
             balance: BalanceConfig | None = None,
             message_max_bytes: int = topic_config.DEFAULT_MAX_MESSAGE_BYTES) -> BrokerNode:
        """Open (recovering) the node whose local state is in `data_dir` (`wal/`, `index/`), objects in
        `store_url`, controller metadata at `metadata_url` (sqlite:///... or postgresql://...). Every setting
        is described in docs/OPERATIONS.md; index_config: IndexService options ("store" overrides its store).
        Retention: the server default for topics without their own; None keeps data forever. wal_url: None or
        file://DIR for a local WAL (default DATA_DIR/wal), any other store URL for the shared WAL.
        metadata_options: MetadataClient snapshot arguments (snapshot_every_records, snapshot_interval_s,
        snapshots_kept). message_max_bytes: the largest record batch of a topic that sets no max.message.bytes
        (Kafka's message.max.bytes)."""
        d = Path(data_dir)
        d.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(d / "broker.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock_fd)
            raise RuntimeError(f"the data directory {d} is in use by another broker process (it holds "
                               f"{d / 'broker.lock'}): stop that process, or give this one another data "
                               "directory (--data-dir)") from None
        store = open_store(store_url)
        meta = MetadataClient(metadata_url, node_id, namespace, **(metadata_options or {}))
        try:  # before anything of the data directory is read: another node's or cluster's WAL is left as it is
            check_identity(d, meta, node_id)
        except BaseException:
            for closer in (meta.close, store.close, lambda: os.close(lock_fd)):
                with contextlib.suppress(Exception):
                    closer()
            raise
        node = cls(d, store, meta, node_id=node_id, retention=RetentionPolicy(retention_ms, retention_bytes),
                   maintenance_interval_s=maintenance_interval_s, read_your_writes_s=read_your_writes_s,
                   message_max_bytes=message_max_bytes)
        node._lock_fd = lock_fd
        node.clock = clock or _now_ms
        node.settings = dict(  # the effective values, for GET /v1/config
            node_id=node_id, namespace=namespace, upload_threshold=upload_threshold,
            upload_interval_s=upload_interval_s, so_threshold=so_threshold, retention_ms=retention_ms,
            retention_bytes=retention_bytes, message_max_bytes=message_max_bytes,
            maintenance_interval_s=maintenance_interval_s, block_cache_bytes=block_cache_bytes,
            max_cache_bytes=max_cache_bytes or max(4 * upload_threshold, 256 << 20),
            read_your_writes_s=read_your_writes_s, failover_history_per_node=failover_history_per_node,
            **balance_settings(balance or BalanceConfig()),
            metadata_snapshot_every_records=meta.snapshot_every_records,
            metadata_snapshot_interval_s=meta.snapshot_interval_s, metadata_snapshots_kept=meta.snapshots_kept,
            **{f"compaction_{k}": v for k, v in dataclasses.asdict(compaction or CompactionConfig()).items()})
        node.compactor = Compactor(store, meta, compaction)  # broker/compaction: started with the other threads
        node.compaction = Periodic("broker-compaction", node.compactor.config.interval_s, node.compactor.run_once)
        try:
            wal_dir, wal_store = node._wal_location(wal_url)
            node._start(dict(index_config or {}), store_url, dict(http=http_address, kafka=kafka_address,
                                                                   lease_ms=lease_ms, token=cluster_token,
                                                                   wal_store=wal_store,
                                                                   failover_history=failover_history_per_node,
                                                                   balance=balance), dict(
                wal_dir=wal_dir, wal_store=wal_store,
                upload_threshold=upload_threshold, upload_interval_s=upload_interval_s, so_threshold=so_threshold,
                block_cache_bytes=block_cache_bytes,
                max_cache_bytes=max_cache_bytes or max(4 * upload_threshold, 256 << 20),
                wal_options=dict(wal_options or {}), min_free_bytes=min_free_bytes))
        except BaseException:
            node._abandon()
            raise
        return node

    def _wal_location(self, wal_url: str | None) -> tuple[Path, BlobStore | None]:
        """The local WAL folder, or the store of the shared WAL (its objects under wal/node-N/)."""
        if not wal_url:
            return self.data_dir / "wal", None
        if wal_url.startswith("file://"):
            return Path(wal_url[len("file://"):]), None
        self._wal_store = open_store(wal_url)
        return self.data_dir / "wal", self._wal_store

    def _abandon(self) -> None:
        """Release what a failed open took (no clean-shutdown work)."""
        for closer in (lambda: self.cluster.stop(shut_down=self._wal_store is None), lambda: self.storage.close(),
                       lambda: self.index.close(),
                       self.meta.close, self.store.close):
            with contextlib.suppress(Exception):
                closer()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _start(self, index_config: dict[str, Any], store_url: str, cluster_options: dict[str, Any],
               storage_options: dict[str, Any]) -> None:
        started = time.monotonic()
        self.meta.register_node()
        # the lease of this incarnation before its WAL is read (Cluster says why)
        membership = Membership(LeaseTable(self.meta.url), self.node_id, self.meta.node_epoch or 0,
                                cluster_options.pop("http"), cluster_options.pop("kafka"),
                                cluster_options.pop("lease_ms"))
        membership.start()
        try:
            meta = self.meta
            # a shared WAL's group commit: a metadata outage within the lease fails none
            self.storage = StreamStorage.open(storage_options.pop("wal_dir"), self.store, meta, **storage_options,
                                              before_ack=lambda: membership.within_lease(meta.check_current))
            # nothing acknowledged once the metadata database went back (broker/metadata/client.py): the records'
            # offsets follow commits the database lost
            self.storage.ack_checks.append(meta.check_not_diverged)
            watch_data_paths(self.storage.disk, self.data_dir / "index", self.store)
            self.partitions = parts = PartitionMap(self.meta, self.storage, self.node_id)
            self.cluster = Cluster(parts, self.meta, membership, **cluster_options)
        except BaseException:
            membership.stop(shut_down=False)  # the open failed: the lease is left to expire
            raise
        every = parts.load_all()
        self.cluster.claim_at_open(every)
        if self._wal_store is not None:  # a failover of the previous incarnation may still be reading this WAL
            self.storage.holds.replay_pending = lambda: replayed_elsewhere(self.meta, self.node_id)
        restored = self.storage.restore_from_wal()
        self.recovered_records = sum(restored.get(p.data_stream, 0) for p in every)
        parts.load_states(every)
        self.unclean_partitions = parts.unclean
        if self.storage.has_unuploaded:
            # acknowledged records not yet in objects: commit them before serving (out of disk: the uploader
            # retries once space returns; the cache and the WAL hold them meanwhile)
            tolerate_out_of_disk(self.storage.force_upload, "upload of recovered records")
        self.index, self.dispatcher = open_index(self.data_dir / "index", store_url, self.node_id, self.clock,
                                                 parts, index_config)
        limits = TopicLimits(self.meta, self.message_max_bytes)  # each topic's max.message.bytes
        self.producer = Producer(parts, self.storage.wal.max_body, self.dispatcher.enqueue, self.clock, limits)
        # Kafka clients' own record batches (api/kafka): stored as sent, idempotent sequences checked
        self.client_batches = ClientBatches(parts, self.storage.wal.max_body, self.dispatcher.enqueue, self.clock,
                                            limits)
        # records with their append time only once every live node reads them (a rolling upgrade: docs/OPERATIONS.md)
        self.producer.timed_records = self.client_batches.timed_records = \
            lambda: membership.reads_everywhere(TIMED_STREAM_RECORDS)
        owned = parts.owned()
        catch_up = catch_up_ranges(parts)
        # failovers this node began before it stopped, their records restored and uploaded above: their last steps
        self.cluster.finish_resumed_replays({(c.topic, c.partition): c.start for c in catch_up})
        tolerate_out_of_disk(lambda: parts.write_states(owned, clean=False), "state records")
        self.dispatcher.start(catch_up)
        self.cluster.start(self.index, self.dispatcher)
        self.lookups = NodeLookups(parts, self.cluster, self.dispatcher, self.index, self.read_your_writes_s)
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

    @property
    def closing(self) -> bool:
        """Whether `close` has begun: the node takes no more changes (NodeClosed), its partitions are handed over."""
        return self._closed

    def _check_usable(self) -> None:
        if self._closed:
            raise NodeClosed()
        self.storage.check_usable()

    # -- topics ----------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: dict[str, int] | None = None) -> dict[str, Any]:
        self._check_usable()
        return self.cluster.create_topic(name, partitions, configs).as_dict()

    def delete_topic(self, name: str) -> dict[str, Any]:
        """Delete the topic everywhere (broker/cluster/cluster.py: Cluster.delete_topic); what it was."""
        self._check_usable()
        return self.cluster.delete_topic(name).as_dict()

    def add_partitions(self, name: str, count: int) -> dict[str, Any]:
        """Grow the topic to `count` partitions (broker/cluster/cluster.py: Cluster.add_partitions); the topic as
        described after."""
        self._check_usable()
        self.cluster.add_partitions(name, count)
        return self.describe_topic(name)

    def describe_topic(self, name: str) -> dict[str, Any]:
        return topic_admin.describe(self.partitions, name, topic_config.ServerDefaults(
            self.retention.retention_ms, self.retention.retention_bytes, self.message_max_bytes))

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

    def fetch_rendered(self, topic: str, partition: int, offset: int, max_count: int, renderer: reads.Renderer
                       ) -> tuple[list[reads.Rendered], int]:
        return reads.fetch_rendered(self.partitions, topic, partition, offset, max_count, renderer)

    def get_by_id(self, msg_id: str) -> OutMessage | None:
        return reads.get_by_id(self.partitions, msg_id)

    def find_by_key(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                    cursor: str | None) -> tuple[list[OutMessage], str | None]:
        return self.lookups.find_by_key(topic, key, begin_ms, end_ms, max_count, cursor)

    def key_hits(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                 cursor: str | None) -> tuple[list[tuple[int, int]], str | None, list[Any]]:
        return self.lookups.key_hits(topic, key, begin_ms, end_ms, max_count, cursor)

    def local_index_query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int | None
                          ) -> list[Any]:
        return self.lookups.local_index_query(topic, key, max_count, begin_ms, end_ms)

    def index_files(self) -> list[dict[str, Any]]:
        return index_file_rows(self.index)

    # -- cluster ------------------------------------------------------------------------------------
    def cluster_nodes(self) -> list[dict[str, Any]]:
        return self.cluster.nodes()

    def reassign(self, topic: str, partition: int, target: int) -> dict[str, Any]:
        self._check_usable()
        return self.cluster.reassign(topic, partition, target)

    def failovers(self) -> list[dict[str, Any]]:
        return failover_reports(self.meta)

    def rebalance(self, execute: bool, by: str = "load") -> dict[str, Any]:
        return self.cluster.rebalance(execute, by)

    def moves(self) -> list[dict[str, Any]]:
        return self.cluster.moves()

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
        self.cluster.publish_index(self.index)
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
    def metadata_unavailable(self) -> str | None:
        """Why the metadata database does not answer this node (None: it answers, or it is embedded SQLite): a new
        connection is tried first when the last was lost (broker/metadata/pg_link.py); or why the node stopped using
        it (the database went back: broker/metadata/client.py, MetadataDiverged)."""
        if self.meta.diverged is not None:
            return self.meta.diverged
        reason = self.meta.log.unavailable()
        cluster = getattr(self, "cluster", None)
        if reason is None and cluster is not None:
            reason = cluster.membership.leases.unavailable()
        return reason

    def close(self) -> None:
        """Clean shutdown: upload the cache, mark clean shutdown, close streams, close the index."""
        if self._closed:
            return
        self._closed = True
        self.maintenance.stop()
        # the Kafka listener's transaction completions and produce-answer catch-ups (made on first use by
        # api/kafka): their threads stop, in a bounded time, while the partitions still take markers
        for part in (getattr(self, "_txn_coordinator", None), getattr(self, "_fresh_answers", None)):
            if part is not None:
                part.close()
        self.compaction.stop()
        self.cluster.leave(self.dispatcher, self.index)  # partitions handed over, index files published
        self.cluster.stop_watching()  # the lease is kept alive until the streams are closed (below)
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
            if self.dispatcher.error is None:  # every acknowledged record dispatched: mark the keyless ends
                self.index.put_batch(keyless_ends(self.partitions, owned))
            self.index.flush()
        except Exception as exc:  # noqa: BLE001
            clean = False
            log.error("index flush failed at close; the next open re-dispatches", extra={"error": str(exc)})
        clean = self.partitions.close_all(owned, clean)
        # shut down when every stream is closed. Else, with a shared WAL, the lease is left to expire and the others
        # fail this node over (they replay its WAL); with a local WAL only this node can read the records it
        # acknowledged and has not uploaded, so its partitions wait for its restart (shut down, as before)
        self.cluster.stop(shut_down=clean or self._wal_store is None)
        self.index.close()
        self.meta.close()
        self.store.close()
        if self._wal_store is not None:
            self._wal_store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("broker node closed", extra={"node_id": self.node_id, "clean": clean, "partitions": len(owned)})

    def __enter__(self) -> BrokerNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
