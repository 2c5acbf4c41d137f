"""MetadataClient: one broker's handle on the controller metadata (streams, nodes, objects, KV).

Every mutating call runs one transaction on the metadata log: take the log's write lock, catch the
in-memory image up with every record other brokers appended, check the request against that image
(stream epochs, node epochs, object states), append the resulting records, commit, and apply them
locally. A stale open, commit, trim or close raises `Fenced` and appends nothing.

Stream rules: create -> CLOSED at epoch -1; `open_stream(id, epoch)` with epoch > current on a CLOSED
stream starts a new range [end, end) owned by this node; the same epoch from the same node is
idempotent, from another node fenced; a lower epoch is fenced; a higher epoch on an OPENED stream is
refused (`InvalidRequest`) until the owner closes it; close is idempotent.
Objects: `prepare_objects` -> upload -> `commit_objects` (stream ranges + stream objects, atomically)
-> MARK_DESTROYED (trim, delete, expiry) -> deleted from the store by `cleanup_objects`.

Snapshots: a client opens from the newest valid snapshot plus the log tail after it (a damaged snapshot
is marked and the previous one used). `maybe_snapshot()` (called by the node's periodic maintenance)
writes a snapshot of the caught-up image when the tail since the newest snapshot reaches
`snapshot_every_records` or `snapshot_interval_s` has passed, keeps the `snapshots_kept` newest and
deletes the log records below the oldest kept one. A client whose image is older than the oldest kept
record (down for long, or lagging) sees the gap on its next read and reloads from a snapshot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker.errors import Fenced, InvalidRequest, MetadataError, StreamNotFound
from broker.metadata import snapshot
from broker.metadata.image import (
    CLOSED,
    COMMITTED,
    MARK_DESTROYED,
    OPENED,
    PREPARED,
    MetadataImage,
    ObjectLookup,
    ObjectMeta,
    Record,
    StreamMeta,
    StreamSetObjectMeta,
)
from broker.metadata.log_store import LockedLog, LogStore, open_log
from broker.objects.format import object_key
from storage_tier import BlobStore

DEFAULT_OBJECT_TTL_MS = 10 * 60 * 1000
DEFAULT_SNAPSHOT_EVERY_RECORDS = 10_000
DEFAULT_SNAPSHOT_INTERVAL_S = 3600.0
DEFAULT_SNAPSHOTS_KEPT = 2
_RELOAD_ATTEMPTS = 10

log = logging.getLogger("mqindex.broker.metadata")


@dataclass(frozen=True)
class CommitRange:
    """[start, end) of a stream, uploaded at stream epoch `epoch`."""

    stream_id: int
    epoch: int
    start: int
    end: int


@dataclass(frozen=True)
class StreamSetObjectCommit:
    object_id: int
    size: int
    ranges: Sequence[CommitRange]


@dataclass(frozen=True)
class StreamObjectCommit:
    object_id: int
    size: int
    range: CommitRange


@dataclass(frozen=True)
class CompactedStreamObject:
    """A stream object written by compaction: [start, end) of one stream."""

    object_id: int
    stream_id: int
    start: int
    end: int
    size: int


@dataclass(frozen=True)
class CompactedStreamSetObject:
    """A stream set object written by compaction: one [start, end) per stream."""

    object_id: int
    size: int
    ranges: dict[int, tuple[int, int]]


@dataclass
class CleanupResult:
    expired: list[int] = field(default_factory=list)  # prepared objects past expiry, marked destroyed
    deleted: list[int] = field(default_factory=list)  # objects removed from the store and the metadata


def _covers(intervals: list[tuple[int, int]], lo: int, hi: int) -> bool:
    """Whether sorted [a, b) intervals cover [lo, hi) without a hole."""
    pos = lo
    for a, b in intervals:
        if a > pos:
            break
        pos = max(pos, b)
        if pos >= hi:
            return True
    return pos >= hi


@dataclass(frozen=True)
class SnapshotResult:
    log_offset: int  # the image offset the snapshot holds
    payload_bytes: int
    written: bool  # False: a snapshot at that offset was there already
    snapshots_deleted: int
    records_truncated: int  # log records deleted below the oldest kept snapshot


def _now_ms() -> int:
    return int(time.time() * 1000)


def _ended(img: MetadataImage, o: ObjectMeta) -> bool:
    """Whether the incarnation that prepared `o` has ended (its node's epoch moved past it)."""
    if o.node_id is None or o.node_epoch is None:
        return False
    node = img.nodes.get(o.node_id)
    return node is not None and node.epoch > o.node_epoch


class MetadataClient:
    """`MetadataClient(url, node_id, namespace)`; call `register_node()` before stream or object changes."""

    def __init__(self, url: str, node_id: int, namespace: str = "_kafka_mqindex", *,
                 snapshot_every_records: int = DEFAULT_SNAPSHOT_EVERY_RECORDS,
                 snapshot_interval_s: float = DEFAULT_SNAPSHOT_INTERVAL_S,
                 snapshots_kept: int = DEFAULT_SNAPSHOTS_KEPT) -> None:
        if snapshot_every_records < 1:
            raise ValueError("snapshot_every_records must be at least 1")
        if snapshot_interval_s <= 0:
            raise ValueError("snapshot_interval_s must be positive")
        if snapshots_kept < 1:
            raise ValueError("snapshots_kept must be at least 1")
        self.url = url
        self.node_id = node_id
        self.namespace = namespace
        self.snapshot_every_records = snapshot_every_records
        self.snapshot_interval_s = snapshot_interval_s
        self.snapshots_kept = snapshots_kept
        self.log: LogStore = open_log(url)
        self.image = MetadataImage()
        self.node_epoch: int | None = None
        self.reloads = 0  # times the image was reloaded from a snapshot after falling behind the truncation
        self._opened_ms = _now_ms()
        self._lock = threading.RLock()
        with self._lock:
            self._load(self.log)

    def close(self) -> None:
        self.log.close()

    def __enter__(self) -> MetadataClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- log plumbing ----------------------------------------------------------------------------
    def catch_up(self) -> int:
        """Apply every record appended since the image's offset; returns the image offset."""
        with self._lock:
            self._advance(self.log)
            return self.image.offset

    def _advance(self, src: LogStore | LockedLog) -> None:
        """Apply the records after the image; reload from a snapshot when they were truncated away."""
        entries = src.read_since(self.image.offset)
        if entries and entries[0][0] != self.image.offset + 1:
            log.info("metadata image behind the log truncation; reloading from a snapshot",
                     extra={"node": self.node_id, "image_offset": self.image.offset,
                            "first_log_offset": entries[0][0]})
            self.reloads += 1
            self._load(src)
            return
        for offset, rec in entries:
            self.image.apply(offset, rec)

    def _load(self, src: LogStore | LockedLog) -> None:
        """Replace the image by the newest valid snapshot plus the log after it (or a full replay)."""
        for _ in range(_RELOAD_ATTEMPTS):
            image = self._load_once(src)
            if image is not None:
                self.image = image
                return
        raise MetadataError(f"node {self.node_id}: the metadata log was truncated under every load attempt "
                            f"({_RELOAD_ATTEMPTS}); cannot open")

    def _load_once(self, src: LogStore | LockedLog) -> MetadataImage | None:
        """One attempt; None when a concurrent truncation removed what it was reading (try again)."""
        damaged: list[str] = []
        for info in src.snapshots():
            if info.damaged:
                damaged.append(f"snapshot at log offset {info.log_offset} (marked damaged)")
                continue
            stored = src.read_snapshot(info.log_offset)
            if stored is None:
                continue  # deleted by a concurrent prune: an older or newer one will do
            where = f"metadata snapshot at log offset {info.log_offset}"
            try:
                image = snapshot.decode(stored[1], stored[0], where)
                if image.offset != info.log_offset:
                    raise snapshot.SnapshotDamaged(f"{where}: holds the image at offset {image.offset}")
            except snapshot.SnapshotDamaged as exc:
                log.error("damaged metadata snapshot; using an older one",
                          extra={"node": self.node_id, "snapshot_offset": info.log_offset, "error": str(exc)})
                src.mark_snapshot_damaged(info.log_offset)
                damaged.append(str(exc))
                continue
            return self._with_tail(image, src)
        image = self._with_tail(MetadataImage(), src)  # no usable snapshot: replay the whole log
        if image is not None:
            return image
        if damaged:
            raise snapshot.SnapshotDamaged(f"node {self.node_id}: the metadata log starts at offset "
                                           f"{src.first_offset()} and no snapshot is usable: " + "; ".join(damaged))
        return None

    @staticmethod
    def _with_tail(image: MetadataImage, src: LogStore | LockedLog) -> MetadataImage | None:
        entries = src.read_since(image.offset)
        if entries and entries[0][0] != image.offset + 1:
            return None  # the records right after this image were truncated
        for offset, rec in entries:
            image.apply(offset, rec)
        return image

    # -- snapshots -------------------------------------------------------------------------------
    def maybe_snapshot(self, now_ms: int | None = None, force: bool = False) -> SnapshotResult | None:
        """Write a snapshot of the caught-up image when due (or `force`), prune old snapshots and truncate the
        log behind the oldest kept one. Returns what was done, None when no snapshot was due."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            self.catch_up()
            valid = [i for i in self.log.snapshots() if not i.damaged]
            newest_offset = valid[0].log_offset if valid else -1
            newest_ms = valid[0].created_ms if valid else self._opened_ms
            tail = self.image.offset - newest_offset
            due = tail >= self.snapshot_every_records or now - newest_ms >= self.snapshot_interval_s * 1000
            if self.image.offset < 0 or tail <= 0 or not (due or force):
                return None
            offset = self.image.offset
            payload = snapshot.encode(self.image)
            with self.log.locked() as txn:
                written = txn.write_snapshot(offset, snapshot.checksum(payload), payload, now)
                infos = txn.snapshots()
                kept = [i for i in infos if not i.damaged][: self.snapshots_kept]
                deleted = 0
                truncated = 0
                if len(kept) == self.snapshots_kept:
                    cutoff = kept[-1].log_offset
                    older = [i.log_offset for i in infos if i.log_offset < cutoff]
                    txn.delete_snapshots(older)
                    deleted = len(older)
                    truncated = txn.truncate_before(cutoff)
        result = SnapshotResult(offset, len(payload), written, deleted, truncated)
        log.info("metadata snapshot", extra={"node": self.node_id, "snapshot_offset": offset,
                                             "payload_bytes": len(payload), "written": written,
                                             "snapshots_deleted": deleted, "records_truncated": truncated})
        return result

    def _txn(self, build) -> object:  # type: ignore[no-untyped-def]
        """Run `build(image) -> (records, result)` under the log lock on a caught-up image."""
        with self._lock:
            with self.log.locked() as txn:
                self._catch_up_in(txn)
                records, result = build(self.image)
                first = self.image.offset + 1
                if records:
                    txn.append(first, records)
            for i, rec in enumerate(records):
                self.image.apply(first + i, rec)
            return result

    def _catch_up_in(self, txn: LockedLog) -> None:
        self._advance(txn)

    def _check_node(self, image: MetadataImage) -> None:
        if self.node_epoch is None:
            raise InvalidRequest(f"node {self.node_id} must register_node() before changing streams or objects")
        node = image.nodes.get(self.node_id)
        if node is None or node.epoch != self.node_epoch:
            raise Fenced(f"node {self.node_id} epoch {self.node_epoch} is stale "
                         f"(current {node.epoch if node else None}): a newer incarnation registered")

    # -- nodes and KV ----------------------------------------------------------------------------
    def register_node(self) -> int:
        """Start a new incarnation of this node: bumps and returns its node epoch, fencing older ones."""
        def build(img: MetadataImage) -> tuple[list[Record], int]:
            node = img.nodes.get(self.node_id)
            epoch = 0 if node is None else node.epoch + 1
            return [{"type": "node", "node_id": self.node_id, "epoch": epoch}], epoch

        self.node_epoch = self._txn(build)  # type: ignore[assignment]
        return self.node_epoch  # type: ignore[return-value]

    def fence_node(self, node_id: int, expected_epoch: int, kv_put: dict[str, str] | None = None
                   ) -> tuple[int, list[int]]:
        """Failover: end the incarnation `expected_epoch` of another node. Raises its node epoch (its every
        later change is refused) and closes the streams it holds open, in one transaction (with `kv_put`, the
        failover's own record of what it does); refused (Fenced) when that incarnation is not the current one
        (another survivor fenced it first, or it re-registered). Returns (new epoch, closed stream ids)."""
        def build(img: MetadataImage) -> tuple[list[Record], tuple[int, list[int]]]:
            self._check_node(img)
            node = img.nodes.get(node_id)
            if node_id == self.node_id or node is None or node.epoch != expected_epoch:
                raise Fenced(f"fence node {node_id}: epoch {expected_epoch} is not its current incarnation "
                             f"({node.epoch if node else None})")
            held = sorted(sid for sid, st in img.streams.items() if st.state == OPENED and st.owner == node_id)
            records: list[Record] = [{"type": "node", "node_id": node_id, "epoch": expected_epoch + 1}]
            records += [{"type": "stream_close", "stream_id": sid, "epoch": img.streams[sid].epoch} for sid in held]
            records += [{"type": "kv_put", "key": k, "value": v} for k, v in (kv_put or {}).items()]
            return records, (expected_epoch + 1, held)

        return self._txn(build)  # type: ignore[return-value]

    def check_current(self) -> None:
        """Raise Fenced when a newer incarnation of this node registered or a survivor fenced it (the shared
        WAL asks this after each group commit is stored and before it is acknowledged)."""
        with self._lock:
            self.catch_up()
            node = self.image.nodes.get(self.node_id)
            if self.node_epoch is not None and (node is None or node.epoch != self.node_epoch):
                raise Fenced(f"node {self.node_id} epoch {self.node_epoch} was fenced "
                             f"(current {node.epoch if node else None})")

    def kv_get(self, key: str, refresh: bool = True) -> str | None:
        if refresh:
            self.catch_up()
        return self.image.kv.get(key)

    def kv_put_if_absent(self, key: str, value: str) -> str:
        """Store key -> value unless present; returns the value that is stored (first writer wins)."""
        def build(img: MetadataImage) -> tuple[list[Record], str]:
            if key in img.kv:
                return [], img.kv[key]
            return [{"type": "kv_put", "key": key, "value": value}], value

        return self._txn(build)  # type: ignore[return-value]

    def kv_put(self, key: str, value: str) -> None:
        self._txn(lambda img: ([{"type": "kv_put", "key": key, "value": value}], None))

    def kv_set_if(self, expect: dict[str, str | None], key: str, value: str | None) -> bool:
        """In one transaction: when every key of `expect` holds its value (None: absent), store key -> value
        (None: delete it). Returns whether it was applied."""
        def build(img: MetadataImage) -> tuple[list[Record], bool]:
            if any(img.kv.get(k) != v for k, v in expect.items()):
                return [], False
            if value is None:
                return ([{"type": "kv_delete", "key": key}] if key in img.kv else []), True
            return [{"type": "kv_put", "key": key, "value": value}], True

        return bool(self._txn(build))

    def kv_put_many(self, items: dict[str, str]) -> None:
        """Store several keys in one transaction."""
        self._txn(lambda img: ([{"type": "kv_put", "key": k, "value": v} for k, v in items.items()], None))

    def kv_update(self, put: dict[str, str], delete: Sequence[str] = ()) -> None:
        """Store the keys of `put` and delete those of `delete` (the ones present) in one transaction."""
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            recs: list[Record] = [{"type": "kv_put", "key": k, "value": v} for k, v in put.items()]
            recs += [{"type": "kv_delete", "key": k} for k in delete if k in img.kv and k not in put]
            return recs, None

        self._txn(build)

    def kv_items(self, prefix: str = "", refresh: bool = True) -> dict[str, str]:
        """Every key starting with `prefix` and its value (from the caught-up image)."""
        if refresh:
            self.catch_up()
        with self._lock:
            return {k: v for k, v in self.image.kv.items() if k.startswith(prefix)}

    def kv_delete(self, key: str) -> None:
        self._txn(lambda img: ([{"type": "kv_delete", "key": key}] if key in img.kv else [], None))

    # -- streams ---------------------------------------------------------------------------------
    def create_stream(self, start_offset: int = 0) -> int:
        def build(img: MetadataImage) -> tuple[list[Record], int]:
            self._check_node(img)
            sid = img.next_stream_id
            return [{"type": "stream_create", "stream_id": sid, "start": start_offset}], sid

        return self._txn(build)  # type: ignore[return-value]

    def create_streams(self, count: int, start_offset: int = 0) -> list[int]:
        """Create `count` streams in one transaction; returns their ids."""
        if count <= 0:
            raise InvalidRequest("create_streams: count must be positive")

        def build(img: MetadataImage) -> tuple[list[Record], list[int]]:
            self._check_node(img)
            first = img.next_stream_id
            ids = list(range(first, first + count))
            return [{"type": "stream_create", "stream_id": sid, "start": start_offset} for sid in ids], ids

        return self._txn(build)  # type: ignore[return-value]

    def get_stream(self, stream_id: int, refresh: bool = True) -> StreamMeta:
        if refresh:
            self.catch_up()
        return self.image.stream(stream_id)

    def _open_records(self, img: MetadataImage, stream_id: int, epoch: int) -> list[Record]:
        """The records opening `stream_id` at `epoch` (none for an idempotent re-open); raises when refused."""
        s = img.stream(stream_id)
        if epoch < s.epoch:
            raise Fenced(f"open stream {stream_id}: epoch {epoch} is stale (current {s.epoch})")
        if epoch == s.epoch:
            if s.owner != self.node_id:
                raise Fenced(f"open stream {stream_id}: epoch {epoch} belongs to node {s.owner}")
            if s.state == OPENED:
                return []  # idempotent re-open by the owner
            raise Fenced(f"open stream {stream_id}: epoch {epoch} was closed; open with a higher epoch")
        if s.state == OPENED:
            raise InvalidRequest(f"open stream {stream_id}: still opened by node {s.owner} at epoch {s.epoch}; "
                                 "it must be closed first")
        return [{"type": "stream_open", "stream_id": stream_id, "epoch": epoch, "node_id": self.node_id,
                 "range_index": (s.ranges[-1].index + 1) if s.ranges else 0}]

    def open_stream(self, stream_id: int, epoch: int) -> StreamMeta:
        def build(img: MetadataImage) -> tuple[list[Record], StreamMeta]:
            self._check_node(img)
            return self._open_records(img, stream_id, epoch), img.stream(stream_id)

        return self._txn(build)  # type: ignore[return-value]

    def open_streams(self, requests: Sequence[tuple[int, int]]) -> dict[int, Exception | None]:
        """Open several (stream id, epoch) in one transaction. Each is checked like `open_stream`; the
        ones refused are left alone and reported with their exception (None: opened)."""
        def build(img: MetadataImage) -> tuple[list[Record], dict[int, Exception | None]]:
            self._check_node(img)
            records: list[Record] = []
            out: dict[int, Exception | None] = {}
            for sid, epoch in requests:
                try:
                    records += self._open_records(img, sid, epoch)
                    out[sid] = None
                except (Fenced, InvalidRequest, StreamNotFound) as exc:
                    out[sid] = exc
            return records, out

        return self._txn(build)  # type: ignore[return-value]

    def close_streams(self, requests: Sequence[tuple[int, int]]) -> None:
        """Close several (stream id, epoch) owned by this node in one transaction (all or nothing)."""
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            self._check_node(img)
            records: list[Record] = []
            for sid, epoch in requests:
                s = self._check_owner(img, "close", sid, epoch)
                if s.state != CLOSED:
                    records.append({"type": "stream_close", "stream_id": sid, "epoch": epoch})
            return records, None

        self._txn(build)

    def _check_owner(self, img: MetadataImage, op: str, stream_id: int, epoch: int) -> StreamMeta:
        s = img.stream(stream_id)
        if epoch < s.epoch:
            raise Fenced(f"{op} stream {stream_id}: epoch {epoch} is stale (current {s.epoch})")
        if epoch > s.epoch:
            raise InvalidRequest(f"{op} stream {stream_id}: epoch {epoch} was never opened (current {s.epoch})")
        if s.owner != self.node_id:
            raise Fenced(f"{op} stream {stream_id}: epoch {epoch} belongs to node {s.owner}, not {self.node_id}")
        return s

    def close_stream(self, stream_id: int, epoch: int) -> None:
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            self._check_node(img)
            s = self._check_owner(img, "close", stream_id, epoch)
            if s.state == CLOSED:
                return [], None
            return [{"type": "stream_close", "stream_id": stream_id, "epoch": epoch}], None

        self._txn(build)

    def trim_stream(self, stream_id: int, epoch: int, new_start: int) -> None:
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            self._check_node(img)
            s = self._check_owner(img, "trim", stream_id, epoch)
            if s.state != OPENED:
                raise InvalidRequest(f"trim stream {stream_id}: the stream is closed")
            if new_start > s.end_offset:
                raise InvalidRequest(f"trim stream {stream_id}: {new_start} is beyond the end offset {s.end_offset}")
            if new_start <= s.start_offset:
                return [], None
            return [{"type": "stream_trim", "stream_id": stream_id, "start": new_start, "at": _now_ms()}], None

        self._txn(build)

    def delete_stream(self, stream_id: int, epoch: int) -> None:
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            self._check_node(img)
            s = img.stream(stream_id)
            if epoch < s.epoch:
                raise Fenced(f"delete stream {stream_id}: epoch {epoch} is stale (current {s.epoch})")
            if s.state == OPENED:
                self._check_owner(img, "delete", stream_id, epoch)
            return [{"type": "stream_delete", "stream_id": stream_id, "at": _now_ms()}], None

        self._txn(build)

    def delete_streams(self, stream_ids: Sequence[int], *, kv_expect: dict[str, str] | None = None,
                       kv_drop: Callable[[str], bool] | None = None,
                       kv_put: dict[str, str] | None = None) -> list[int]:
        """Delete streams whichever node holds them, with KV changes, in ONE transaction (a topic's deletion:
        its streams and its keys go together, so no node ever sees half a topic). `kv_expect`: keys that must
        still hold these values, else `InvalidRequest` and nothing is applied (a concurrent deletion or
        re-creation); `kv_drop`: every key it accepts is deleted; `kv_put`: keys written. A node that held a
        stream open finds it gone at its next commit (StreamNotFound) and drops what it cached. Objects
        holding only deleted streams are MARK_DESTROYED; stream set objects shared with live streams keep
        the deleted streams' blocks until compaction rewrites them. Returns the stream ids deleted."""
        def build(img: MetadataImage) -> tuple[list[Record], list[int]]:
            self._check_node(img)
            for k, v in (kv_expect or {}).items():
                if img.kv.get(k) != v:
                    raise InvalidRequest(f"delete streams: metadata key {k!r} changed meanwhile")
            now = _now_ms()
            gone = [sid for sid in dict.fromkeys(stream_ids) if sid in img.streams]
            records: list[Record] = [{"type": "stream_delete", "stream_id": sid, "at": now} for sid in gone]
            if kv_drop is not None:
                records += [{"type": "kv_delete", "key": k} for k in sorted(img.kv) if kv_drop(k)]
            records += [{"type": "kv_put", "key": k, "value": v} for k, v in (kv_put or {}).items()]
            return records, gone

        return self._txn(build)  # type: ignore[return-value]

    # -- objects ---------------------------------------------------------------------------------
    def object_key(self, object_id: int) -> str:
        return object_key(object_id, self.namespace)

    def prepare_objects(self, count: int = 1, ttl_ms: int = DEFAULT_OBJECT_TTL_MS) -> int:
        """Reserve `count` consecutive object ids (PREPARED until committed or expired); returns the first."""
        if count <= 0:
            raise InvalidRequest("prepare_objects: count must be positive")

        def build(img: MetadataImage) -> tuple[list[Record], int]:
            self._check_node(img)
            now = _now_ms()
            first = img.next_object_id
            return [{"type": "objects_prepare", "first_id": first, "count": count, "at": now,
                     "expires_at": now + ttl_ms, "node_id": self.node_id, "node_epoch": self.node_epoch}], first

        return self._txn(build)  # type: ignore[return-value]

    def commit_objects(self, sso: StreamSetObjectCommit | None = None,
                       stream_objects: Sequence[StreamObjectCommit] = ()) -> None:
        """Commit one upload: the objects become COMMITTED and each stream's end offset advances, atomically.

        Every range must continue its stream exactly (start == end offset so far), at the stream's
        current epoch, on a stream this node has OPENED; otherwise nothing is applied.
        """
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            self._check_node(img)
            ids = ([sso.object_id] if sso else []) + [o.object_id for o in stream_objects]
            if not ids:
                raise InvalidRequest("commit: nothing to commit")
            if len(set(ids)) != len(ids):
                raise InvalidRequest(f"commit: object ids repeat ({ids})")
            for oid in ids:
                o = img.objects.get(oid)
                if o is None or o.state != PREPARED:
                    raise InvalidRequest(f"commit: object {oid} is {o.state if o else 'unknown'}, not PREPARED")
            ranges = list(sso.ranges if sso else []) + [o.range for o in stream_objects]
            ends: dict[int, int] = {}
            for r in sorted(ranges, key=lambda r: (r.stream_id, r.start)):
                s = img.streams.get(r.stream_id)
                if s is None:
                    raise StreamNotFound(f"commit: stream {r.stream_id} does not exist")
                if r.epoch < s.epoch:
                    raise Fenced(f"commit: stream {r.stream_id} epoch {r.epoch} is stale (current {s.epoch})")
                if r.epoch > s.epoch or s.state != OPENED or s.owner != self.node_id:
                    raise Fenced(f"commit: stream {r.stream_id} is not opened by node {self.node_id} at epoch "
                                 f"{r.epoch} (state {s.state}, epoch {s.epoch}, owner {s.owner})")
                expect = ends.get(r.stream_id, s.end_offset)
                if r.start != expect or r.end <= r.start:
                    raise InvalidRequest(f"commit: stream {r.stream_id} range [{r.start}, {r.end}) does not continue "
                                         f"the stream at {expect}")
                ends[r.stream_id] = r.end
            rec: Record = {"type": "commit", "node_id": self.node_id, "at": _now_ms(), "sso": None,
                           "stream_objects": [{"object_id": o.object_id, "stream_id": o.range.stream_id,
                                               "start": o.range.start, "end": o.range.end, "size": o.size}
                                              for o in stream_objects]}
            if sso is not None:
                if len({r.stream_id for r in sso.ranges}) != len(sso.ranges):
                    raise InvalidRequest("commit: a stream set object holds one range per stream")
                rec["sso"] = {"object_id": sso.object_id, "size": sso.size,
                              "ranges": [[r.stream_id, r.start, r.end] for r in sso.ranges]}
            return [rec], None

        self._txn(build)

    # -- compaction (broker/compaction) ----------------------------------------------------------
    def commit_compaction(self, destroyed: Sequence[int], sso: CompactedStreamSetObject | None = None,
                          stream_objects: Sequence[CompactedStreamObject] = (),
                          stream_epochs: dict[int, int] | None = None, grace_ms: int = 0) -> None:
        """Commit one compaction in ONE transaction: the new stream set object and stream objects become
        COMMITTED, the compacted objects `destroyed` are MARK_DESTROYED as of `grace_ms` from now, so
        `cleanup_objects` deletes them only after that grace period (reads in flight finish).
        Checked against the caught-up image, else nothing is applied:
        this node's epoch (a fenced node commits nothing); each source is a committed stream set object of
        this node or a committed stream object; each output id is PREPARED; each output stream exists;
        `stream_epochs` (stream object compaction) are the streams' current epochs owned by this node; every
        live source range (above the stream's start offset) is covered by the outputs."""
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            self._check_node(img)
            node = img.nodes.get(self.node_id)
            outputs = ([sso.object_id] if sso else []) + [o.object_id for o in stream_objects]
            if not destroyed and not outputs:
                raise InvalidRequest("commit_compaction: nothing to commit")
            if len(set(outputs) | set(destroyed)) != len(outputs) + len(destroyed):
                raise InvalidRequest(f"commit_compaction: object ids repeat ({destroyed} -> {outputs})")
            for oid in outputs:
                o = img.objects.get(oid)
                if o is None or o.state != PREPARED:
                    raise InvalidRequest(f"commit_compaction: object {oid} is {o.state if o else 'unknown'}, "
                                         "not PREPARED")
            for sid, epoch in (stream_epochs or {}).items():
                s = img.streams.get(sid)
                if s is None:
                    raise StreamNotFound(f"commit_compaction: stream {sid} does not exist")
                if epoch != s.epoch or s.owner != self.node_id or s.state != OPENED:
                    raise Fenced(f"commit_compaction: stream {sid} epoch {epoch} is not this node's current epoch "
                                 f"(state {s.state}, epoch {s.epoch}, owner {s.owner})")
            so_index = {so.object_id: so for s in img.streams.values() for so in s.stream_objects}
            live: list[tuple[int, int, int, int]] = []  # (object id, stream, start, end) to cover
            for oid in destroyed:
                o = img.objects.get(oid)
                if o is None or o.state != COMMITTED:
                    raise InvalidRequest(f"commit_compaction: source object {oid} is "
                                         f"{o.state if o else 'unknown'}, not COMMITTED")
                if node is not None and oid in node.sso:
                    live += [(oid, sid, a, b) for sid, (a, b) in node.sso[oid].ranges.items()]
                elif oid in so_index:
                    so = so_index[oid]
                    live.append((oid, so.stream_id, so.start, so.end))
                else:
                    raise InvalidRequest(f"commit_compaction: source object {oid} is neither a stream set object "
                                         f"of node {self.node_id} nor a stream object")
            cover: dict[int, list[tuple[int, int]]] = {}
            for sid, (a, b) in (sso.ranges.items() if sso else []):
                cover.setdefault(sid, []).append((a, b))
            for o in stream_objects:
                cover.setdefault(o.stream_id, []).append((o.start, o.end))
            for sid in cover:
                if sid not in img.streams:
                    raise StreamNotFound(f"commit_compaction: output stream {sid} was deleted meanwhile")
            for oid, sid, a, b in live:
                s = img.streams.get(sid)
                if s is None:
                    continue
                lo = max(a, s.start_offset)
                if lo < b and not _covers(sorted(cover.get(sid, [])), lo, b):
                    raise InvalidRequest(f"commit_compaction: stream {sid} [{lo}, {b}) of object {oid} is not "
                                         "covered by the compaction outputs")
            now = _now_ms()
            rec: Record = {"type": "compaction", "node_id": self.node_id, "at": now, "destroyed": list(destroyed),
                           "destroyed_at": now + max(0, grace_ms),
                           "sso": None if sso is None else {
                               "object_id": sso.object_id, "size": sso.size,
                               "ranges": [[sid, a, b] for sid, (a, b) in sorted(sso.ranges.items())]},
                           "stream_objects": [{"object_id": o.object_id, "stream_id": o.stream_id, "start": o.start,
                                               "end": o.end, "size": o.size} for o in stream_objects]}
            return [rec], None

        self._txn(build)

    def node_objects(self, refresh: bool = True) -> tuple[list[StreamSetObjectMeta], dict[int, StreamMeta]]:
        """This node's committed stream set objects and a copy-free view of the streams (compaction input)."""
        if refresh:
            self.catch_up()
        with self._lock:
            node = self.image.nodes.get(self.node_id)
            ssos = [StreamSetObjectMeta(o.object_id, o.node_id, o.size, dict(o.ranges))
                    for o in (node.sso.values() if node else [])]
            return ssos, dict(self.image.streams)

    def object_counts(self) -> dict[str, int]:
        """Committed stream set objects (all nodes) and stream objects in the image."""
        with self._lock:
            return {"stream_set_objects": sum(len(n.sso) for n in self.image.nodes.values()),
                    "stream_objects": sum(len(s.stream_objects) for s in self.image.streams.values())}

    def object_meta(self, object_id: int) -> ObjectMeta | None:
        with self._lock:
            return self.image.objects.get(object_id)

    def cleanup_objects(self, store: BlobStore, now_ms: int | None = None, destroy_delay_ms: int = 0) -> CleanupResult:
        """Expire PREPARED objects past their expiry or prepared by an incarnation that has ended (its node
        re-registered or was fenced: it can never commit them), delete MARK_DESTROYED objects from the store,
        then from the metadata. Safe to repeat after a crash at any step (deleting a missing key is fine)."""
        result = CleanupResult()
        now = _now_ms() if now_ms is None else now_ms

        def expire(img: MetadataImage) -> tuple[list[Record], list[int]]:
            ids = sorted(o.object_id for o in img.objects.values()
                         if o.state == PREPARED and (o.expires_at <= now or _ended(img, o)))
            return ([{"type": "objects_destroy", "ids": ids, "at": now}] if ids else []), ids

        result.expired = self._txn(expire)  # type: ignore[assignment]
        with self._lock:
            doomed = sorted(o.object_id for o in self.image.objects.values()
                            if o.state == MARK_DESTROYED and (o.destroyed_at or 0) + destroy_delay_ms <= now)
        if not doomed:
            return result
        store.delete([self.object_key(oid) for oid in doomed])

        def forget(img: MetadataImage) -> tuple[list[Record], list[int]]:
            ids = [oid for oid in doomed if oid in img.objects and img.objects[oid].state == MARK_DESTROYED]
            return ([{"type": "objects_deleted", "ids": ids}] if ids else []), ids

        result.deleted = self._txn(forget)  # type: ignore[assignment]
        return result

    def committed_objects(self) -> list[int]:
        with self._lock:
            return sorted(o.object_id for o in self.image.objects.values() if o.state == COMMITTED)

    # -- read path -------------------------------------------------------------------------------
    def get_objects(self, stream_id: int, start: int, end: int, limit: int = 1 << 30,
                    refresh: bool = True) -> ObjectLookup:
        if refresh:
            self.catch_up()
        with self._lock:
            return self.image.get_objects(stream_id, start, end, limit)
