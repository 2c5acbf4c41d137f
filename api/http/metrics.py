"""Prometheus metrics of one server process: HTTP requests and latencies by route (produce, fetch, query, get),
the object stores' request meters, WAL group commits, index files per state and reads that found damage in
the store (`mqindex_corrupt_reads_total{component="broker"|"index"}`), and the free bytes of each data
path with the out-of-disk state."""

from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from broker.streams.disk_space import DiskSpace
from index_service import FileState
from storage_tier import BlobStore

log = logging.getLogger("mqindex.api.damage")


class StoreCollector(Collector):
    """Exports BlobStore request meters (requests by kind, bytes in/out), one label set per component."""

    def __init__(self, stores: Mapping[str, BlobStore]) -> None:
        self.stores = dict(stores)

    def collect(self) -> Iterator[CounterMetricFamily]:
        req = CounterMetricFamily("mqindex_object_store_requests", "Object store requests by kind",
                                  labels=["component", "backend", "kind"])
        moved = CounterMetricFamily("mqindex_object_store_bytes", "Object store bytes moved",
                                    labels=["component", "backend", "direction"])
        for component, store in self.stores.items():
            snap = store.meter.snapshot()
            for kind, n in snap.requests.items():
                req.add_metric([component, store.name, kind], n)
            moved.add_metric([component, store.name, "in"], snap.bytes_in)
            moved.add_metric([component, store.name, "out"], snap.bytes_out)
        yield req
        yield moved


class NodeCollector(Collector):
    """Reads the node's own figures at scrape time: index files per state, WAL group commits."""

    def __init__(self, index_files: Callable[[], list[dict[str, Any]]], wal_fsyncs: Callable[[], int]) -> None:
        self.index_files = index_files
        self.wal_fsyncs = wal_fsyncs

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        files = GaugeMetricFamily("mqindex_index_files", "Index files per lifecycle state", labels=["state"])
        items = GaugeMetricFamily("mqindex_index_items", "Index entries per lifecycle state", labels=["state"])
        by_state: Tally[str] = Tally()
        item_count: Tally[str] = Tally()
        for f in self.index_files():
            by_state[str(f["state"])] += 1
            item_count[str(f["state"])] += int(f.get("items", 0))
        for state in sorted(set(by_state) | {s.value for s in FileState}):
            files.add_metric([state], by_state[state])
            items.add_metric([state], item_count[state])
        yield files
        yield items
        yield CounterMetricFamily("mqindex_wal_group_commits", "WAL group commits (one fsync each)",
                                  value=self.wal_fsyncs())


class FilterMemoryCollector(Collector):
    """Bytes of index key filters held in memory by this node's index and by its cluster lookups (the filters of
    other nodes' published files), each bounded by index_filter_cache_bytes."""

    def __init__(self, holders: Mapping[str, Any]) -> None:
        self.holders = dict(holders)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        held = GaugeMetricFamily("mqindex_index_filter_bytes", "Bytes of index key filters held in memory",
                                 labels=["scope"])
        limit = GaugeMetricFamily("mqindex_index_filter_limit_bytes", "The bound on the bytes of index key filters "
                                  "held in memory (index_filter_cache_bytes)", labels=["scope"])
        for scope, h in self.holders.items():
            held.add_metric([scope], h.bytes_held)
            limit.add_metric([scope], h.max_bytes)
        yield held
        yield limit


class MergeCollector(Collector):
    """The index's tier merges (index_service/merging.py): merged files made, input files merged, bytes written,
    and the files waiting in closed windows as of the last merge cycle."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.stats
        yield CounterMetricFamily("mqindex_index_merges", "Merged index files made", value=s.merges)
        yield CounterMetricFamily("mqindex_index_merged_inputs", "Index files replaced by merged files",
                                  value=s.files_merged)
        yield CounterMetricFamily("mqindex_index_merge_bytes", "Bytes of merged index files written",
                                  value=s.bytes_written)
        yield GaugeMetricFamily("mqindex_index_merge_backlog_files", "Index files waiting in closed windows to be "
                                "merged, as of the last merge cycle", value=s.backlog)


def published_merger(node: Any) -> Any | None:
    """The node's merger of published index files (broker/cluster/published_merge.py): made at the node's first
    pass as the failover leader; None before, and on the other nodes."""
    expiry = getattr(getattr(getattr(node, "cluster", None), "failover", None), "expiry", None)
    return getattr(expiry, "merger", None)


class ClusterMergeCollector(Collector):
    """The cluster's merges of published index files (broker/cluster/published_merge.py), run by the failover
    leader: zero on the other nodes, and on the leader until its first pass."""

    def __init__(self, stats: Callable[[], Any]) -> None:
        self.stats = stats  # the leader's PublishedMergeStats, or None

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.stats()
        get = (lambda name: 0) if s is None else (lambda name: getattr(s, name))
        yield CounterMetricFamily("mqindex_cluster_index_merges", "Merged files of published index files made",
                                  value=get("merges"))
        yield CounterMetricFamily("mqindex_cluster_index_merged_inputs", "Published index files replaced by merged "
                                  "files", value=get("files_merged"))
        yield CounterMetricFamily("mqindex_cluster_index_merge_bytes", "Bytes of merged published index files "
                                  "written", value=get("bytes_written"))
        yield CounterMetricFamily("mqindex_cluster_index_merge_failures", "Merges of published index files that "
                                  "failed (tried again at the next pass)", value=get("failures"))
        yield GaugeMetricFamily("mqindex_cluster_index_merge_backlog_files", "Published index files due for a merge "
                                "and not merged, as of the last pass", value=get("backlog"))
        yield GaugeMetricFamily("mqindex_cluster_index_merge_awaiting_release_files", "Inputs of committed merges "
                                "of published files not deleted yet (the grace)", value=get("awaiting_release"))


class DiskCollector(Collector):
    """Free bytes and the free-space floor of each data path, and whether writes are refused for lack of disk."""

    def __init__(self, disk: DiskSpace) -> None:
        self.disk = disk

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        free = GaugeMetricFamily("mqindex_disk_free_bytes", "Free bytes of each data path", labels=["data", "path"])
        floor = GaugeMetricFamily("mqindex_disk_floor_bytes", "Free-space floor below which writes are refused",
                                  labels=["data", "path"])
        for s in self.disk.spaces():
            free.add_metric([s.name, s.path], s.free)
            floor.add_metric([s.name, s.path], s.floor)
        yield free
        yield floor
        yield GaugeMetricFamily("mqindex_out_of_disk", "1 while writes are refused for lack of disk space, else 0",
                                value=0 if self.disk.episode is None else 1)
        yield CounterMetricFamily("mqindex_out_of_disk_episodes", "Out-of-disk episodes begun",
                                  value=self.disk.episodes)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.http_requests = Counter("mqindex_http_requests", "HTTP requests by route and status", ["route", "status"],
                                     registry=self.registry)
        self.wal_fsync = Histogram("mqindex_wal_fsync_seconds", "WAL group commit fsync latency",
                                   buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
                                   registry=self.registry)
        self.http_latency = Histogram("mqindex_http_latency_seconds", "HTTP request latency by route", ["route"],
                                      registry=self.registry)
        self.kafka_latency = Histogram("mqindex_kafka_request_seconds", "Kafka request time by API, from reading "
                                       "the request to writing its answer (a Fetch's includes its wait for "
                                       "records; a Produce's its WAL fsync)", ["api"],
                                       buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05,
                                                0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
                                       registry=self.registry)
        self.corrupt_reads = Counter("mqindex_corrupt_reads", "Reads that found an object or index file damaged in "
                                     "the store", ["component"], registry=self.registry)
        for component in ("broker", "index"):
            self.corrupt_reads.labels(component)
        self._damage_lock = threading.Lock()
        self._damaged: set[tuple[str, str]] = set()

    def corrupt_read(self, component: str, obj: str, check: str, error: str) -> None:
        """Count one read that found damage; log the object the first time only (not once per request)."""
        self.corrupt_reads.labels(component).inc()
        with self._damage_lock:
            first = (component, obj) not in self._damaged
            self._damaged.add((component, obj))
        if first:
            log.error("damaged in the store", extra={"component": component, "object": obj, "check": check,
                                                     "error": error})

    def kafka_observer(self, names: Mapping[int, str]) -> Callable[[int, float], None]:
        """The Kafka listener's `observe`: (API key, seconds) into mqindex_kafka_request_seconds, labelled with
        the API's name from `names`; each label's child is looked up once (labels() takes a lock and builds a
        key, on every request of the listener's loop otherwise)."""
        children: dict[int, Any] = {}

        def observe(api: int, seconds: float) -> None:
            child = children.get(api)
            if child is None:
                child = children[api] = self.kafka_latency.labels(names.get(api, f"api-{api}"))
            child.observe(seconds)
        return observe

    def watch_stores(self, stores: Mapping[str, BlobStore]) -> None:
        if stores:
            self.registry.register(StoreCollector(stores))

    def watch_node(self, index_files: Callable[[], list[dict[str, Any]]], wal_fsyncs: Callable[[], int]) -> None:
        self.registry.register(NodeCollector(index_files, wal_fsyncs))

    def watch_disk(self, disk: DiskSpace) -> None:
        self.registry.register(DiskCollector(disk))
