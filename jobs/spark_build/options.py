"""Build options, plan, summary and names: what the driver and the executors share (no Spark, no I/O)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.partitions.record_entries import ALL_KINDS

HOUR_MS = 3_600_000
DEFAULT_NAMESPACE = "_kafka_mqindex"
DEFAULT_MAX_ITEMS = 1_000_000  # ServiceConfig.max_items: the online files' size
DEFAULT_SLOTS = 262_144  # ServiceConfig.slots
DEFAULT_PART_BYTES = 16 * 1024 * 1024  # ServiceConfig.upload_part_bytes
#: --merged: files of the service's top merge tier (ServiceConfig.merge_tiers_ms[-1], a week aligned to the epoch as
#: the service's tier windows are) of at most ServiceConfig.merge_max_items items, as the service's own merges make
MERGED_WINDOW_MS = 7 * 24 * HOUR_MS
MERGED_MAX_ITEMS = 16_000_000
BUILD_PREFIX = "index-builds/"  # = external_builds.BUILD_PREFIX (executors do not import index_service)

Entry = tuple[int, int, int, int, list[str]]  # partition, offset, size, store_time_ms, keys


def build_stem(begin_ms: int, name: str, attempt: str, seq: int) -> str:
    """A build file's stem; index_service.external_builds.parse_build_stem reads it back."""
    return f"b{begin_ms:016d}-{name}-{attempt}-{seq:04d}"


def build_key(name: str, attempt: str, stem: str) -> str:
    """The index-store key of one build file (external_builds.build_key)."""
    return f"{BUILD_PREFIX}{name}/{attempt}/{stem}.mqxc"


class BuildError(ValueError):
    """Bad arguments or nothing to build: raised before any Spark work starts."""


class BuildFailed(RuntimeError):
    """The Spark work failed; the attempt's objects were deleted and nothing was registered."""


# -- options, plan, summary --------------------------------------------------------------------------
@dataclass
class BuildOptions:
    metadata_url: str
    store_url: str  # the broker's object store (where its stream objects are)
    index_dir: str  # the index service directory the build is registered in
    topic: str
    partitions: list[int] | None = None  # None: every partition
    from_ms: int | None = None  # inclusive; None: from the beginning
    to_ms: int | None = None  # exclusive; None: everything committed
    kinds: tuple[str, ...] = ALL_KINDS
    master: str = "local[*]"
    index_store_url: str | None = None  # where index files go (default: store_url, as the broker's index)
    namespace: str = DEFAULT_NAMESPACE
    window_ms: int = 0  # time window of one file; 0: one hour (the online files' roll age), merged: a week
    max_items: int = 0  # most items of one file; 0: 1,000,000 (the online files' size), merged: 16,000,000
    #: write merged history directly: a file per week window of up to MERGED_MAX_ITEMS items (window_ms and
    #: max_items given explicitly still win), so a backfill of months makes a few large files, not thousands
    merged: bool = False
    slots: int = DEFAULT_SLOTS
    spark_conf: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float = 2.0
    wait_served_s: float = 30.0  # a running service adopts the build on its next cycle; wait this long
    ship_code: bool = False  # ship the project's packages as a zip (workers without mqindex installed)
    #: test hook: "build:N" makes the executor building file range N (0-based) fail after uploading a file
    fault: str | None = None

    def __post_init__(self) -> None:
        if not self.window_ms:
            self.window_ms = MERGED_WINDOW_MS if self.merged else HOUR_MS
        if not self.max_items:
            self.max_items = MERGED_MAX_ITEMS if self.merged else DEFAULT_MAX_ITEMS

    @property
    def index_store(self) -> str:
        return self.index_store_url or self.store_url


@dataclass(frozen=True)
class PartTask:
    """One object part an executor reads: offsets [start, end) of stream `stream_id` in object `key`."""

    partition: int
    stream_id: int
    key: str
    size: int
    start: int
    end: int


@dataclass
class BuildPlan:
    name: str
    attempt: str
    topic: str
    topic_id: int
    partitions: list[int]
    from_ms: int
    to_ms: int
    kinds: tuple[str, ...]
    tasks: list[PartTask]
    objects: int  # distinct objects read
    offsets: int  # offsets covered by the tasks (records, before time filtering)
    pruned: int  # objects skipped by commit time
    uncommitted_note: str = ""

    def describe(self) -> dict[str, Any]:
        out = {"name": self.name, "attempt": self.attempt, "topic": self.topic, "partitions": self.partitions,
               "from_ms": self.from_ms, "to_ms": self.to_ms, "kinds": list(self.kinds), "objects": self.objects,
               "parts": len(self.tasks), "offsets": self.offsets, "pruned_objects": self.pruned}
        if set(self.kinds) == set(ALL_KINDS):
            out["covers"] = self.covers()
        return out

    def covers(self) -> dict[str, Any]:
        """What the build indexes whole (every key kind the broker indexes online): each record of `topic` stored
        in [from_ms, to_ms) at the offsets of the object parts read, per partition as [start, end) runs. A
        service adopting the build no longer serves its own files whose every entry lies in it
        (index_service/external_builds.py), so each entry is answered from one file."""
        runs: dict[int, list[list[int]]] = {}
        for t in sorted(self.tasks, key=lambda t: (t.partition, t.start)):
            rs = runs.setdefault(t.partition, [])
            if rs and t.start <= rs[-1][1]:
                rs[-1][1] = max(rs[-1][1], t.end)
            else:
                rs.append([t.start, t.end])
        return {"topic": self.topic, "from_ms": self.from_ms, "to_ms": self.to_ms,
                "offsets": {str(p): rs for p, rs in sorted(runs.items())}}


@dataclass
class BuildSummary:
    name: str
    attempt: str
    files: int = 0
    items: int = 0
    records_read: int = 0  # records decoded from the objects
    records_indexed: int = 0  # records in the window with keys
    bytes_read: int = 0
    bytes_uploaded: int = 0
    windows: int = 0
    seconds: float = 0.0
    extract_seconds: float = 0.0
    build_seconds: float = 0.0
    served: bool = False  # adopted by a service (this process's, or a running one's)
    replaced_files: int = 0
    manifests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return self.records_read / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("manifests")
        d["records_per_s"] = round(self.records_per_s, 1)
        d["files_list"] = [{"stem": m["stem"], "items": m["items"], "min_ms": m["min_ms"], "max_ms": m["max_ms"],
                            "key": m["key"], "size": m["size"]} for m in self.manifests]
        return d


def parse_time(value: str | int | None, what: str) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 date/time (UTC when no offset is given)."""
    if value is None or value == "":
        return None
    if isinstance(value, int):
        return value
    s = value.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise BuildError(f"{what} {value!r} is neither milliseconds since the epoch nor an ISO 8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def build_name(index_dir: str, topic: str, topic_id: int, partitions: list[int], from_ms: int | None,
               to_ms: int | None, kinds: tuple[str, ...], window_ms: int, max_items: int) -> str:
    """The build's identity: the same build into the same index directory has the same name (and
    replaces the earlier run); two index directories sharing one store never share a name."""
    ident = json.dumps({"index_dir": str(Path(index_dir).resolve()), "topic": topic, "topic_id": topic_id,
                        "partitions": sorted(partitions), "from": from_ms, "to": to_ms, "kinds": list(kinds),
                        "window_ms": window_ms, "max_items": max_items}, sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()[:16]
