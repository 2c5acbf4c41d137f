"""ServiceConfig: every knob of the index service, with laptop-sized defaults.

RocketMQ's geometry (5,000,000 slots, 20,000,000 items per file, 72 h retention) is available as
`ServiceConfig.rocketmq_defaults()`; the laptop defaults keep a WRITING file at ~42 MB.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from index_file import IndexHit

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
WEEK_MS = 7 * DAY_MS


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class ServiceConfig:
    #: hash slots of each native WRITING file
    slots: int = 262_144
    #: items (one per key of a record) a WRITING file holds before it rolls
    max_items: int = 1_000_000
    #: a WRITING file with items rolls once it is this old (by its begin time)
    roll_age_ms: int = HOUR_MS
    #: index-only retention, an operator option: files whose newest store time is older than
    #: now - retention_ms are deleted even while the broker still stores their records (those records
    #: are then no longer found by key). None: a file lives exactly as long as the data it points at
    #: (see `is_live`).
    retention_ms: int | None = None
    #: is_live(topic, queue_id, max_offset): whether the broker still stores the queue's records up to
    #: max_offset. A file whose every (topic, queue) range is no longer live is expired (index_service/
    #: ranges.py). None: files expire only by `retention_ms`.
    is_live: Callable[[str, int, int], bool] | None = None
    #: BlobStore URL uploads go to (None: files stay COMPACTED on local disk)
    store_url: str | None = None
    #: threads of the query pool
    query_threads: int = 4
    #: the writer thread writes a batch when this many records are buffered, or every flush_interval_ms
    write_batch: int = 8192
    flush_interval_ms: int = 20
    #: the writer saves the checkpoint (after syncing the WRITING file) at most this often while it writes;
    #: flush(), a roll, forget_queues and close save it at once. A crash loses nothing put: what the
    #: checkpoint does not cover yet is re-dispatched by the broker and deduplicated by the recovered tail.
    checkpoint_interval_ms: int = 200
    #: put() waits (back-pressure) when this many records are buffered and not yet written
    max_pending: int = 1_000_000
    #: the background thread runs a maintenance cycle this often (seconds); 0 = only on demand
    maintain_interval_s: float = 1.0
    #: a failed compaction or upload is retried after this long, doubling up to retry_max_s
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    #: msync the WRITING file before each durable checkpoint (power-loss durability; a killed
    #: process loses nothing written to the mapping either way)
    sync_writes: bool = True
    #: where this service's files live in the store. Its orphan sweep deletes unclaimed objects under this
    #: prefix only, so every service sharing a store (one per broker node) needs its own prefix.
    remote_prefix: str = "index/"
    #: part size of multipart uploads (files above it are uploaded in parts)
    upload_part_bytes: int = 16 * 1024 * 1024
    #: consult each sealed file's key filter before reading it (False: read every file in range, as RocketMQ does)
    key_filters: bool = True
    #: memory held for key filters, least recently used dropped first (about 2.3 bytes per distinct key of a
    #: file: 64 MiB holds the filters of some 29 million keys; a filter not held is read again from local disk)
    filter_cache_bytes: int = 64 * 1024 * 1024
    #: merge tiers (merging.py): the span of each tier's windows, aligned to the epoch (UTC days, then weeks).
    #: Uploaded files whose newest entry falls in a closed window of tier n are merged into one file of that
    #: tier. (): never merge.
    merge_tiers_ms: tuple[int, ...] = (DAY_MS, WEEK_MS)
    #: a window is merged once it ended this long ago (files rolled late into it are in by then)
    merge_settle_ms: int = HOUR_MS
    #: a window is merged once it holds at least this many files
    merge_min_files: int = 2
    #: files merged in one step at most (each gets merge_window_bytes / inputs of read buffer)
    merge_max_inputs: int = 32
    #: items of one merged file at most (its key filter is built from up to 8 B per item held in memory)
    merge_max_items: int = 16_000_000
    #: read buffers of one merge, split between its inputs (at least one 64 KiB block each)
    merge_window_bytes: int = 8 * 1024 * 1024
    #: a merge's inputs are deleted from the store this long after the merged file replaced them (readers that
    #: listed them, here or on other nodes, finish first)
    merge_grace_ms: int = 10 * 60_000
    #: the cluster's merge of published index files no live node merges (a departed node's, a failover's rescued
    #: ones; broker/cluster/published_merge.py), run by the failover leader after their expiry. Read by the
    #: cluster, not by this service; the tiers as merge_tiers_ms (): never merge them
    cluster_merge_tiers_ms: tuple[int, ...] = (DAY_MS, WEEK_MS)
    #: seconds between the failover leader's passes over the published files (their expiry, then their merges)
    cluster_merge_interval_s: float = 30.0
    #: a closed window of published files is merged once it ended this long ago
    cluster_merge_settle_ms: int = HOUR_MS
    #: a node not alive this long has its published files merged
    cluster_merge_departed_ms: int = DAY_MS
    #: the inputs of a cluster merge are deleted from the store this long after the merged file replaced them
    cluster_merge_grace_ms: int = 10 * 60_000
    #: published files merged in one step at most
    cluster_merge_max_inputs: int = 32
    #: items of one merged published file at most
    cluster_merge_max_items: int = 16_000_000
    #: milliseconds clock (tests inject one)
    clock: Callable[[], int] = field(default=wall_clock_ms)
    #: called with each hit that is not exact (RocketMQ files compare a 32-bit hash only); returns
    #: whether the record at (queue_id, offset) really carries hit.key. None: inexact hits are
    #: returned with exact=False and the caller verifies them.
    verifier: Callable[[IndexHit], bool] | None = None
    #: test hook called at named crash points of every state transition (see docs/INDEX_SERVICE.md)
    crash_hook: Callable[[str], None] | None = None

    @classmethod
    def rocketmq_defaults(cls, **overrides: Any) -> ServiceConfig:
        base: dict[str, Any] = {"slots": 5_000_000, "max_items": 20_000_000, "retention_ms": 72 * HOUR_MS}
        base.update(overrides)
        return cls(**base)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ServiceConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"unknown IndexService option(s): {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        for name in ("slots", "max_items", "query_threads", "write_batch", "max_pending", "upload_part_bytes",
                     "filter_cache_bytes"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.roll_age_ms <= 0 or (self.retention_ms is not None and self.retention_ms <= 0):
            raise ValueError("roll_age_ms and retention_ms must be > 0 (retention_ms None: follow the data)")
        if any(int(t) <= 0 for t in self.merge_tiers_ms) or list(self.merge_tiers_ms) != sorted(self.merge_tiers_ms):
            raise ValueError(f"merge_tiers_ms must be increasing spans > 0, got {self.merge_tiers_ms}")
        for name in ("merge_max_inputs", "merge_max_items", "merge_window_bytes"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.merge_min_files < 2 or self.merge_max_inputs < 2:
            raise ValueError("merge_min_files and merge_max_inputs must be >= 2")
        if self.merge_settle_ms < 0 or self.merge_grace_ms < 0:
            raise ValueError("merge_settle_ms and merge_grace_ms must be >= 0")
        self._validate_cluster_merge()
        if self.checkpoint_interval_ms < 0:
            raise ValueError(f"checkpoint_interval_ms must be >= 0, got {self.checkpoint_interval_ms}")
        p = self.remote_prefix
        if not p or not p.endswith("/") or p.startswith("/") or ".." in p.split("/"):
            raise ValueError(f"remote_prefix must be a relative folder ending in '/', got {p!r}")
        if self.upload_part_bytes < 5 * 1024 * 1024:
            raise ValueError("upload_part_bytes must be at least 5 MiB (the S3 minimum part size)")

    def _validate_cluster_merge(self) -> None:
        tiers = self.cluster_merge_tiers_ms
        if any(int(t) <= 0 for t in tiers) or list(tiers) != sorted(tiers):
            raise ValueError(f"cluster_merge_tiers_ms must be increasing spans > 0, got {tiers}")
        if self.cluster_merge_interval_s <= 0:
            raise ValueError(f"cluster_merge_interval_s must be > 0, got {self.cluster_merge_interval_s}")
        if self.cluster_merge_max_inputs < 2 or self.cluster_merge_max_items <= 0:
            raise ValueError("cluster_merge_max_inputs must be >= 2 and cluster_merge_max_items > 0")
        for name in ("cluster_merge_settle_ms", "cluster_merge_departed_ms", "cluster_merge_grace_ms"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
