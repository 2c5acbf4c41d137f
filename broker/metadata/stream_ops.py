"""The stream half of MetadataClient (AutoMQ's StreamManager): create, open, close, trim and delete streams,
each one metadata transaction checked against the caught-up image (epochs and owners; `Fenced` otherwise)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from broker.errors import Fenced, InvalidRequest, StreamNotFound
from broker.metadata.image import CLOSED, OPENED, MetadataImage, Record, StreamMeta
from broker.metadata.time_rules import wall_ms

if TYPE_CHECKING:
    from broker.metadata.client import MetadataClient as _Base
else:
    _Base = object


class StreamOps(_Base):
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

    def _open_records(self, img: MetadataImage, stream_id: int, epoch: int, take_back: bool = False) -> list[Record]:
        """The records opening `stream_id` at `epoch` (none for an idempotent re-open); raises when refused.
        take_back: the caller (this node) does not hold the stream open now, so a stream OPENED by this node at a
        lower epoch is one it left open (an earlier incarnation that stopped without closing it, or a close of
        this one whose outcome was never settled): closed and opened again in the same transaction
        (`open_streams`)."""
        s = img.stream(stream_id)
        if epoch < s.epoch:
            raise Fenced(f"open stream {stream_id}: epoch {epoch} is stale (current {s.epoch})")
        if epoch == s.epoch:
            if s.owner != self.node_id:
                raise Fenced(f"open stream {stream_id}: epoch {epoch} belongs to node {s.owner}")
            if s.state == OPENED:
                return []  # idempotent re-open by the owner
            raise Fenced(f"open stream {stream_id}: epoch {epoch} was closed; open with a higher epoch")
        records: list[Record] = []
        if s.state == OPENED:
            if not (take_back and s.owner == self.node_id):
                raise InvalidRequest(f"open stream {stream_id}: still opened by node {s.owner} at epoch {s.epoch}; "
                                     "it must be closed first")
            records.append({"type": "stream_close", "stream_id": stream_id, "epoch": s.epoch})
        return records + [{"type": "stream_open", "stream_id": stream_id, "epoch": epoch, "node_id": self.node_id,
                           "range_index": (s.ranges[-1].index + 1) if s.ranges else 0}]

    def open_stream(self, stream_id: int, epoch: int) -> StreamMeta:
        def build(img: MetadataImage) -> tuple[list[Record], StreamMeta]:
            self._check_node(img)
            return self._open_records(img, stream_id, epoch), img.stream(stream_id)

        return self._txn(build)  # type: ignore[return-value]

    def open_streams(self, requests: Sequence[tuple[int, int]], take_back: Collection[int] = ()
                     ) -> dict[int, Exception | None]:
        """Open several (stream id, epoch) in one transaction. Each is checked like `open_stream`; the
        ones refused are left alone and reported with their exception (None: opened).

        take_back: stream ids this node does not hold open now; those the metadata shows OPENED by this node (an
        earlier incarnation stopped without closing them: a crash, a failed final upload; or a close whose outcome
        was never settled) are closed and opened at the new epoch in this same transaction. Closed first in a
        transaction of their own, another node (the target of a move, a node the partition is assigned to) could
        open them in between, at their committed end: without what the earlier incarnation acknowledged and did
        not upload (in this node's WAL), and it would write new records at those offsets."""
        def build(img: MetadataImage) -> tuple[list[Record], dict[int, Exception | None]]:
            self._check_node(img)
            records: list[Record] = []
            out: dict[int, Exception | None] = {}
            for sid, epoch in requests:
                try:
                    records += self._open_records(img, sid, epoch, sid in take_back)
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
            return [{"type": "stream_trim", "stream_id": stream_id, "start": new_start, "at": wall_ms()}], None

        self._txn(build)

    def delete_stream(self, stream_id: int, epoch: int) -> None:
        def build(img: MetadataImage) -> tuple[list[Record], None]:
            self._check_node(img)
            s = img.stream(stream_id)
            if epoch < s.epoch:
                raise Fenced(f"delete stream {stream_id}: epoch {epoch} is stale (current {s.epoch})")
            if s.state == OPENED:
                self._check_owner(img, "delete", stream_id, epoch)
            return [{"type": "stream_delete", "stream_id": stream_id, "at": wall_ms()}], None

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
            now = wall_ms()
            gone = [sid for sid in dict.fromkeys(stream_ids) if sid in img.streams]
            records: list[Record] = [{"type": "stream_delete", "stream_id": sid, "at": now} for sid in gone]
            if kv_drop is not None:
                records += [{"type": "kv_delete", "key": k} for k in sorted(img.kv) if kv_drop(k)]
            records += [{"type": "kv_put", "key": k, "value": v} for k, v in (kv_put or {}).items()]
            return records, gone

        return self._txn(build)  # type: ignore[return-value]
