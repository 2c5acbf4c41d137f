"""Compaction settings and their defaults (AutoMQ's defaults where it has one); docs/OPERATIONS.md lists them."""

from __future__ import annotations

from dataclasses import dataclass

from broker.compaction.plan import memory_budget

MiB = 1 << 20


@dataclass(frozen=True)
class CompactionConfig:
    interval_s: float = 300.0  # a stream set object compaction cycle every 5 min (0: no periodic thread)
    force_split_ms: int = 120 * 60 * 1000  # SSOs older than this are split wholly into stream objects
    max_objects: int = 500  # SSOs merged per run, newest first
    split_size: int = 8 * MiB  # a stream's run bigger than this leaves the SSO as its own stream object
    cache_size: int = 200 * MiB  # memory of one run: plan, read batch and part buffer (plan.memory_budget)
    read_batch: int = 16 * MiB  # bytes of blocks one GET batch reads
    so_max_size: int = 10 << 30  # stream object compaction merges up to this many bytes
    copy_min: int = 5 * MiB  # pieces this big move by server-side UploadPartCopy (S3's minimum part)
    part_size: int = 5 * MiB  # multipart part size of the objects compaction writes
    grace_ms: int = 60 * 1000  # compacted objects are deleted this long after the commit (reads in flight)
    prepared_ttl_ms: int = 30 * 60 * 1000  # prepared output ids expire (a crashed run leaks nothing)

    def __post_init__(self) -> None:
        for name in ("max_objects", "split_size", "cache_size", "read_batch", "so_max_size", "copy_min",
                     "part_size", "prepared_ttl_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compaction {name} must be positive, got {getattr(self, name)}")
        for name in ("interval_s", "force_split_ms", "grace_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"compaction {name} must not be negative, got {getattr(self, name)}")
        memory_budget(self.cache_size, self.part_size, self.read_batch)  # a cache too small is refused here
