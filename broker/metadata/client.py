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
from collections.abc import Callable, Sequence
from typing import Any

from broker.errors import Fenced, InvalidRequest, MetadataDiverged, MetadataError, MetadataUnavailable
from broker.metadata import snapshot
from broker.metadata.image import (
    OPENED,
    MetadataImage,
    Record,
)
from broker.metadata.log_store import LockedLog, LogStore, open_log
from broker.metadata.object_ops import ObjectOps
from broker.metadata.requests import (
    SnapshotResult,
)
from broker.metadata.stream_ops import StreamOps
from broker.metadata.time_rules import wall_ms
from broker.metadata.value_version import check_value

DEFAULT_SNAPSHOT_EVERY_RECORDS = 10_000
DEFAULT_SNAPSHOT_INTERVAL_S = 3600.0
DEFAULT_SNAPSHOTS_KEPT = 2
_RELOAD_ATTEMPTS = 10

log = logging.getLogger("mqindex.broker.metadata")

class MetadataClient(StreamOps, ObjectOps):
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
        #: the digest of the log record at the image's offset (log_store.digest), as this client applied or first
        #: read it, compared with the database's at each catch-up (None: no record there known yet); and why the
        #: node stopped when the database was found without it (MetadataDiverged)
        self._digest: str | None = None
        self.diverged: str | None = None
        self._opened_ms = wall_ms()
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
        """Apply the records after the image; reload from a snapshot when they were truncated away. The database
        hashes the record at the image's offset in the same query: MetadataDiverged when it no longer holds the
        one applied (`_check_went_back`)."""
        self.check_not_diverged()
        at = self.image.offset
        found, entries, last = src.read_checked(at)
        if found is None or found != self._digest:
            self._check_went_back(src, at, found, entries)
            if found is not None:
                self._digest = found  # not known before (a load): from now on it is
        if entries and entries[0][0] != at + 1:
            log.info("metadata image behind the log truncation; reloading from a snapshot",
                     extra={"node": self.node_id, "image_offset": at, "first_log_offset": entries[0][0]})
            self.reloads += 1
            self._load(src)
            return
        if entries:
            self._digest = None  # an apply that fails part way leaves the record at the image's offset unknown
            for offset, rec in entries:
                self.image.apply(offset, rec)
            self._digest = last

    def check_not_diverged(self) -> None:
        """MetadataDiverged once the database was found to have gone back (`_check_went_back`), else nothing."""
        if self.diverged is not None:
            raise MetadataDiverged(self.diverged)

    def _check_went_back(self, src: LogStore | LockedLog, at: int, found: str | None, entries: list[Any]) -> None:
        """The record at the image's offset is missing, or not the one known. Missing with records after it is the
        truncation behind a snapshot; missing or different when one was known, with nothing after it (or another
        record there), is a database that went back: MetadataDiverged, and the node stays stopped. A standby in
        recovery (a read served by a replica that is behind) is a database that does not answer yet."""
        if self._digest is None or (found is None and entries):
            return
        if found is not None:
            why = f"holds another record at offset {at} than the one this node applied"
        else:
            ends = src.last_offset()
            why = f"ends at offset {ends}, before offset {at}, the last record this node applied" \
                if ends is not None else f"holds no record, and this node applied records up to offset {at}"
        if src.in_recovery():
            raise MetadataUnavailable(f"the metadata database is a standby in recovery, behind this node (its log "
                                      f"{why}): waiting for the primary")
        self.diverged = (f"node {self.node_id}: the metadata database went back: its log {why}. "
                         "A failover to a standby that had not received the last commits, or a restore from a "
                         "backup, loses those changes; this node stops reading and writing the metadata. Check "
                         "what was lost, then restart the node: it loads the database's log as it is now")
        log.error("the metadata database went back: metadata reads and writes stopped",
                  extra={"node": self.node_id, "log_offset": at, "error": self.diverged})
        raise MetadataDiverged(self.diverged)

    def _load(self, src: LogStore | LockedLog) -> None:
        """Replace the image by the newest valid snapshot plus the log after it (or a full replay)."""
        for _ in range(_RELOAD_ATTEMPTS):
            loaded = self._load_once(src)
            if loaded is not None:
                self.image, self._digest = loaded  # together: a failed load leaves neither replaced
                return
        raise MetadataError(f"node {self.node_id}: the metadata log was truncated under every load attempt "
                            f"({_RELOAD_ATTEMPTS}); cannot open")

    def _load_once(self, src: LogStore | LockedLog) -> tuple[MetadataImage, str | None] | None:
        """One attempt: the image and the digest of the record at its offset (`_with_tail`); None when a concurrent
        truncation removed what it was reading (try again)."""
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
        loaded = self._with_tail(MetadataImage(), src)  # no usable snapshot: replay the whole log
        if loaded is not None:
            return loaded
        if damaged:
            raise snapshot.SnapshotDamaged(f"node {self.node_id}: the metadata log starts at offset "
                                           f"{src.first_offset()} and no snapshot is usable: " + "; ".join(damaged))
        return None

    @staticmethod
    def _with_tail(image: MetadataImage, src: LogStore | LockedLog) -> tuple[MetadataImage, str | None] | None:
        """The image with the log after it applied, and the digest of the record at its new offset (what the next
        catch-up compares)."""
        found, entries, last = src.read_checked(image.offset)
        if entries and entries[0][0] != image.offset + 1:
            return None  # the records right after this image were truncated
        for offset, rec in entries:
            image.apply(offset, rec)
        return image, last if entries else found

    # -- snapshots -------------------------------------------------------------------------------
    def maybe_snapshot(self, now_ms: int | None = None, force: bool = False) -> SnapshotResult | None:
        """Write a snapshot of the caught-up image when due (or `force`), prune old snapshots and truncate the
        log behind the oldest kept one. Returns what was done, None when no snapshot was due."""
        now = wall_ms() if now_ms is None else now_ms
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
                self._advance(txn)  # the log still holds what the image was made from (it may have gone back)
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
                for rec in records:  # never a value every node would refuse to apply (value_version.py)
                    if rec["type"] == "kv_put":
                        check_value(rec["key"], rec["value"])
                stored = txn.append(first, records) if records else None
            if records:
                self._digest = None  # as in _advance
                for i, rec in enumerate(records):
                    self.image.apply(first + i, rec)
                self._digest = stored
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

    def kv_update_if(self, expect: dict[str, str | None], put: dict[str, str], delete: Sequence[str] = ()) -> bool:
        """In one transaction: when every key of `expect` holds its value (None: absent), store the keys of `put`
        and delete those of `delete` (the ones present). Returns whether it was applied."""
        def build(img: MetadataImage) -> tuple[list[Record], bool]:
            if any(img.kv.get(k) != v for k, v in expect.items()):
                return [], False
            recs: list[Record] = [{"type": "kv_put", "key": k, "value": v} for k, v in put.items()]
            recs += [{"type": "kv_delete", "key": k} for k in delete if k in img.kv and k not in put]
            return recs, True

        return bool(self._txn(build))

    def kv_items(self, prefix: str = "", refresh: bool = True) -> dict[str, str]:
        """Every key starting with `prefix` and its value (from the caught-up image)."""
        if refresh:
            self.catch_up()
        with self._lock:
            return self.image.kv.items_with(prefix)

    def kv_watch(self, segment: str, fn: Callable[[str, str | None], None]) -> MetadataImage:
        """Call `fn(key, value)` now for every key of `segment` ("group_offsets/"), then after each put (value) or
        delete (None) of one of its keys the image applies, under this client's lock (`fn` must be quick and must
        not wait for anything that waits for this client). Returns the image watched: a reload from a snapshot
        replaces it (`self.image is not` the returned one), and a watcher that needs to go on watches again."""
        with self._lock:
            self.image.kv.watch(segment, fn)
            for k, v in self.image.kv.items_with(segment).items():
                fn(k, v)
            return self.image

    def kv_delete(self, key: str) -> None:
        self._txn(lambda img: ([{"type": "kv_delete", "key": key}] if key in img.kv else [], None))
