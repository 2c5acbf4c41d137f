"""The object half of MetadataClient (AutoMQ's ObjectManager): prepare and commit objects, compaction's commits,
the cleanup of destroyed objects and the read path's object lookups, each one metadata transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.errors import Fenced, InvalidRequest, StreamNotFound
from broker.metadata.image import (
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
from broker.metadata.requests import (
    CleanupResult,
    CompactedStreamObject,
    CompactedStreamSetObject,
    StreamObjectCommit,
    StreamSetObjectCommit,
)
from broker.metadata.time_rules import incarnation_ended, wall_ms
from broker.objects.format import object_key
from storage_tier import BlobStore

if TYPE_CHECKING:
    from broker.metadata.client import MetadataClient as _Base
else:
    _Base = object

DEFAULT_OBJECT_TTL_MS = 10 * 60 * 1000

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


class ObjectOps(_Base):
    # -- objects ---------------------------------------------------------------------------------
    def object_key(self, object_id: int) -> str:
        return object_key(object_id, self.namespace)

    def prepare_objects(self, count: int = 1, ttl_ms: int = DEFAULT_OBJECT_TTL_MS) -> int:
        """Reserve `count` consecutive object ids (PREPARED until committed or expired); returns the first."""
        if count <= 0:
            raise InvalidRequest("prepare_objects: count must be positive")

        def build(img: MetadataImage) -> tuple[list[Record], int]:
            self._check_node(img)
            now = wall_ms()
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
            rec: Record = {"type": "commit", "node_id": self.node_id, "at": wall_ms(), "sso": None,
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
            now = wall_ms()
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
        now = wall_ms() if now_ms is None else now_ms

        def expire(img: MetadataImage) -> tuple[list[Record], list[int]]:
            ids = sorted(o.object_id for o in img.objects.values()
                         if o.state == PREPARED and (o.expires_at <= now or incarnation_ended(img, o)))
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
