"""StreamStorage: the streams of one node over its WAL, log cache, block cache and object store.

    storage = StreamStorage.open(wal_dir, store, meta, ...)    # replays the WAL (held until restore)
    opened = storage.open_streams([(sid, epoch), ...])          # Stream or the reason it was refused
    storage.restore_from_wal()                                  # acknowledged records not yet in objects
    storage.start()                                             # the uploader thread
    ... Stream.append / Stream.fetch / Stream.trim ...
    storage.flush(); storage.stop(); storage.force_upload(); storage.close(); storage.close_streams(...)

Append path: `Stream.append` -> `append` queues the encoded stream record on the WAL under one lock (so
WAL order is each stream's offset order) and registers its trim slot -> the WAL's group commit fsyncs ->
in WAL order the record enters the log cache, the stream's confirmed end advances, the caller's
`on_durable` runs, the uploader is told the cache size -> the returned future resolves.

Upload path (`force_upload`, run by the UploadLoop thread on size or interval): snapshot the cache of the
open streams -> `upload_batch` (stream objects for big runs, one stream set object for the rest) ->
commit in the controller metadata with the stream epochs checked -> drop from the cache -> trim the WAL
below the oldest record not yet committed. A fenced commit finds which streams this node lost
(`check_fenced`), drops them and tells the owner of the streams through `on_lost`.

Moves over the shared WAL (broker/cluster/handoff.py): a stream opened here may continue at its previous owner's
acknowledged end before the records between its committed end and there are here (`borrow`: read from that
owner's WAL objects in the background; reads of the range wait, the stream is not uploaded until then); a stream
moved away may still be read from this node's WAL (`lend`: its WAL records stay until the metadata shows them
committed, `release_lent`).

Out of disk (`disk`, a DiskSpace over the WAL folder and whatever the node adds): an append that would cross
the free-space floor is refused before it is queued; a WAL write refused by the filesystem fails that group
commit and everything queued behind it, and each stream goes back to its acknowledged end. Both begin an
episode: appends and uploads to a local store on a full filesystem are refused, reads go on, and the poll
thread resumes writing once space returns and the WAL has checked its tail. Any other failure is for good.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from broker.errors import Fenced, MetadataError, MetadataUnavailable, OutOfDisk, StreamNotFound, WalError
from broker.metadata import MetadataClient
from broker.metadata.image import OPENED
from broker.metadata.pg_link import WHAT, until_answered
from broker.objects.format import (
    RECORD_HEADER_SIZE,
    RECORD_MAGIC,
    TIMED_RECORD_MAGIC,
    UNTIMED_RECORD_HEADER_SIZE,
    StreamRecord,
    decode_record_header,
    encode_record,
)
from broker.streams.block_cache import BlockCache
from broker.streams.disk_space import DiskSpace
from broker.streams.log_cache import LogCache
from broker.streams.moved_range import BorrowedRange
from broker.streams.object_wal import ObjectWal
from broker.streams.stream import Stream
from broker.streams.stream_reader import StreamReader
from broker.streams.upload_loop import UploadLoop
from broker.streams.uploader import upload_batch
from broker.streams.wal import HEADER_SIZE as WAL_HEADER_SIZE
from broker.streams.wal import Wal, WalRecord
from broker.streams.wal_holds import WalHolds, replays
from broker.streams.wal_trim import WalSlot, WalTrimTracker
from storage_tier import BlobStore, StorageUnavailable
from storage_tier.disk_space import is_out_of_space

log = logging.getLogger("mqindex.broker.streams")

_FAR = 1 << 62
#: how long a close whose outcome is unknown waits for the metadata database to answer (close_streams)
SETTLE_S = 60.0


def decode_stream_record(body: bytes) -> StreamRecord:
    """A WAL body: one stream record in the object format (its header, with the append time since that is
    stored, then the payload)."""
    if len(body) < UNTIMED_RECORD_HEADER_SIZE:
        raise WalError(f"WAL body of {len(body)} bytes is shorter than a stream record header")
    magic, sid, epoch, base, count, plen, append_ms, hsize = decode_record_header(body, 0)
    if magic not in (RECORD_MAGIC, TIMED_RECORD_MAGIC) or plen != len(body) - hsize:
        raise WalError(f"WAL body is not a stream record (magic {magic}, payload {plen} of {len(body)} bytes)")
    return StreamRecord(sid, epoch, base, count, body[hsize:], append_ms)


class StreamStorage:
    def __init__(self, wal: Wal | ObjectWal, store: BlobStore, meta: MetadataClient, *, upload_threshold: int,
                 upload_interval_s: float, so_threshold: int, block_cache_bytes: int, max_cache_bytes: int,
                 min_free_bytes: int | None = None) -> None:
        self.wal = wal
        self.disk = DiskSpace(min_free_bytes)
        if wal.directory is not None:  # a shared WAL (ObjectWal) has no local folder to watch
            self.disk.watch("wal", wal.directory)
        self.disk.on_resume.append(wal.resume)
        self.store = store
        self.meta = meta
        self.so_threshold = so_threshold
        self.max_cache_bytes = max_cache_bytes
        self.cache = LogCache()
        self.block_cache = BlockCache(block_cache_bytes)
        self.reader = StreamReader(store, meta, self.cache, block_cache=self.block_cache)
        self.tracker = WalTrimTracker()
        # a cache limit below the threshold also triggers uploads: back-pressure waits for one (wait_for_cache_room)
        self.uploader = UploadLoop(self.force_upload, lambda: self.cache.size, min(upload_threshold, max_cache_bytes),
                                   upload_interval_s)
        self.on_lost: Callable[[list[Stream], Exception], None] = lambda streams, exc: None
        self.failed: BaseException | None = None
        self._open: dict[int, Stream] = {}
        self._recovered = [(w, decode_stream_record(w.body)) for w in wal.recovered]
        self._append_lock = threading.Lock()  # orders WAL appends with their trim slots
        self._upload_lock = threading.Lock()
        self._commit_unknown = False  # an upload's commit failed without the metadata refusing it (see force_upload)
        #: more conditions of acknowledging, each raising when it does not hold (the cluster's lease)
        self.ack_checks: list[Callable[[], None]] = []
        # moves over a shared WAL (broker/streams/moved_range.py): ranges of streams open here still being read
        # from their previous owner's WAL, and ranges of streams moved away that only this node's WAL holds
        self._borrowed: dict[int, BorrowedRange] = {}
        self.holds = WalHolds(meta)  # streams moved away, or a failover replays, whose records the WAL keeps
        #: stream id -> [appends, bytes appended, reads, bytes read] since this node opened (load reports)
        self.io: dict[int, list[int]] = {}
        #: records of the streams open here that a previous owner's shared WAL holds below this node's own (a move
        #: not committed yet), read before this node's WAL is restored (set by the cluster)
        self.before_restore: Callable[[dict[int, Stream]], list[StreamRecord]] | None = None

    @classmethod
    def open(cls, wal_dir: Path, store: BlobStore, meta: MetadataClient, *, upload_threshold: int,
             upload_interval_s: float, so_threshold: int, block_cache_bytes: int, max_cache_bytes: int,
             wal_options: dict[str, int] | None = None, min_free_bytes: int | None = None,
             wal_store: BlobStore | None = None, before_ack: Callable[[], None] | None = None) -> StreamStorage:
        """wal_store: keep the WAL in this BlobStore (ObjectWal, readable by a survivor) instead of `wal_dir`;
        before_ack: its check that this node is still current before a group commit is acknowledged (default: the
        metadata's `check_current`)."""
        options = dict(wal_options or {})
        wal: Wal | ObjectWal
        if wal_store is not None:
            wal = ObjectWal.open(wal_store, meta.node_id, before_ack=before_ack or meta.check_current,
                                 **{k: v for k, v in options.items() if k in ("max_body", "max_batch")})
        else:
            wal = Wal.open(wal_dir, **options)
        try:
            return cls(wal, store, meta, upload_threshold=upload_threshold, upload_interval_s=upload_interval_s,
                       so_threshold=so_threshold, block_cache_bytes=block_cache_bytes,
                       max_cache_bytes=max_cache_bytes, min_free_bytes=min_free_bytes)
        except BaseException:
            wal.close()
            raise

    # -- opening and closing streams --------------------------------------------------------------
    def held_elsewhere(self, sid: int) -> int | None:
        """The node holding stream `sid` open that keeps this node from opening it, or None: closed, or left
        OPENED by an earlier incarnation of this node (`open_streams` takes it back)."""
        s = self.meta.get_stream(sid, refresh=False)
        if s.state != OPENED or (s.owner == self.meta.node_id and sid not in self._open):
            return None
        return s.owner

    def open_streams(self, requests: list[tuple[int, int]]) -> dict[int, Stream | str]:
        """Open each (stream id, epoch) in one metadata transaction: a Stream, or why it was refused. A stream
        this node's previous incarnation left open is taken back in that transaction (never closed in between)."""
        take_back = {sid for sid, _epoch in requests if sid not in self._open}
        results = self.meta.open_streams(requests, take_back) if requests else {}
        out: dict[int, Stream | str] = {}
        committed: dict[int, int] = {}
        for sid, epoch in requests:
            err = results.get(sid)
            if err is not None:
                out[sid] = str(err)
                continue
            end = self.meta.get_stream(sid, refresh=False).end_offset
            stream = Stream(self, sid, epoch, end)
            self._open[sid] = stream
            committed[sid] = end
            out[sid] = stream
        self.tracker.committed(committed)
        return out

    def close_streams(self, streams: list[Stream]) -> None:
        """Close the streams at their epochs in the metadata (after their data is uploaded). When the metadata
        does not take the close, they stay open here too (a hand-off that failed then serves its partition again,
        and can be tried again; closed here but open in the metadata, no one could ever close them)."""
        live = [s for s in streams if not s.fenced and not s.closed]
        for s in live:
            s.closed = True
            self._open.pop(s.stream_id, None)
        if live:
            try:
                self.meta.close_streams([(s.stream_id, s.epoch) for s in live])
            except MetadataError:  # refused: nothing applied
                self._reopen(live)
                raise
            except BaseException:
                # the close may have been applied all the same (a connection lost at COMMIT): only the streams the
                # metadata still has open at our epoch are open again here
                with contextlib.suppress(Exception):
                    self._catch_up_through_outage()
                    self._reopen([s for s in live if self._still_open(s)])
                raise

    def _catch_up_through_outage(self, bound_s: float = SETTLE_S, pause_s: float = 0.5) -> None:
        """Catch up with the metadata log, asked again for up to `bound_s` while the database does not answer: a close
        whose outcome is not known yet (the outage began at or before its commit) is settled once it answers. Left
        unsettled, the streams stayed closed here and open in the metadata: the partition was served by no one
        until this node restarted. Past the bound the error stands and they stay closed here (serving them while
        the close may have been applied could let two nodes write one stream)."""
        deadline = time.monotonic() + bound_s

        def past_deadline() -> None:
            if time.monotonic() >= deadline:
                raise MetadataUnavailable(f"{WHAT} still does not answer after {bound_s:g} s")

        until_answered(self.meta.catch_up, past_deadline, pause_s)

    def _still_open(self, s: Stream) -> bool:
        m = self.meta.image.streams.get(s.stream_id)
        return m is not None and m.state == OPENED and m.epoch == s.epoch and m.owner == self.meta.node_id

    def _reopen(self, streams: list[Stream]) -> None:
        for s in streams:
            s.closed = False
            self._open[s.stream_id] = s

    def abandon(self, streams: list[Stream]) -> None:
        """This node no longer owns these streams: drop their cached records and stop them holding the WAL."""
        for s in streams:
            s.fenced = True
            self._open.pop(s.stream_id, None)
            self.cache.mark_uploaded({s.stream_id: _FAR})
            self.tracker.forget_stream(s.stream_id)

    def restore_from_wal(self) -> dict[int, int]:
        """Put WAL records beyond each open stream's committed end back in the cache, re-stamped with the
        stream's epoch; records of streams not open here stop holding the WAL, except those a move still reads
        (lent) and those a failover of the previous incarnation, under way on another node, has yet to replay
        (broker/streams/wal_holds.py). Returns records restored per stream. Called once, after the streams of
        the previous incarnation are opened."""
        recovered, self._recovered = self._recovered, []
        mine = []
        replayed = self.holds.replayed_elsewhere() if recovered else None  # by a failover under way elsewhere
        held: dict[int, list[WalSlot]] = {}  # its streams' records here, kept until it commits them
        for w, rec in recovered:
            mine_now = rec.stream_id in self._open
            lent = rec.stream_id in self.holds  # its next owner reads it from here until it commits it
            beyond = not mine_now and not lent and rec.last_offset > self.holds.committed_end(rec.stream_id)
            hold = beyond and replayed is not None and replays(replayed, rec.stream_id)
            slot = WalSlot(rec.stream_id, rec.last_offset, w.next_offset,
                           released=not mine_now and not lent and not hold, wal_start=w.offset)
            self.tracker.add(slot)
            if hold:  # the survivor has not read it yet: trimmed now, it would serve the partition without it
                held.setdefault(rec.stream_id, []).append(slot)
            if mine_now:
                mine.append(rec)
            elif beyond and not hold:
                log.error("acknowledged WAL records of a stream this node does not own are not restored",
                          extra={"stream": rec.stream_id, "offset": rec.base_offset})
        self.holds.hold_for_replay(held)
        borrowed = self.before_restore(dict(self._open)) if self.before_restore is not None else []
        return self.restore_records([*borrowed, *mine], "WAL recovery")

    def restore_records(self, records: list[StreamRecord], what: str = "failover replay") -> dict[int, int]:
        """Acknowledged records (this node's WAL at open, or a dead node's shared WAL at failover) beyond each
        open stream's end go to the cache, re-stamped with the stream's epoch here, to be uploaded. Returns
        records restored per stream."""
        restored: dict[int, int] = {}
        for rec in records:
            stream = self._open.get(rec.stream_id)
            if stream is None or rec.last_offset <= stream.next_offset:
                continue  # not open here, or already committed (or restored)
            if rec.base_offset != stream.next_offset:
                raise WalError(f"{what}: stream {rec.stream_id} record at {rec.base_offset} does not continue "
                               f"the stream at {stream.next_offset}")
            self.cache.append(dataclasses.replace(rec, epoch=stream.epoch))
            stream.next_offset = stream.confirmed_end = rec.last_offset
            restored[rec.stream_id] = restored.get(rec.stream_id, 0) + rec.count
        return restored

    @property
    def has_unuploaded(self) -> bool:
        return bool(self.cache.size or len(self.tracker))

    # -- appends ----------------------------------------------------------------------------------
    def append(self, stream: Stream, rec: StreamRecord, on_durable: Callable[[StreamRecord], None] | None
               ) -> Future[Any]:
        """The WAL append behind `Stream.append` (the caller holds the stream's lock)."""
        slot = WalSlot(rec.stream_id, rec.last_offset)
        body = encode_record(rec)
        io = self.io.setdefault(rec.stream_id, [0, 0, 0, 0])
        io[0] += 1
        io[1] += len(rec.payload)
        self.disk.check_write("wal", len(body) + WAL_HEADER_SIZE)
        with self._append_lock:
            try:
                wal_fut = self.wal.append_async(body)
            except OutOfDisk as exc:
                self.disk.enter("wal", exc.path, exc.detail)
                raise
            self.tracker.add(slot)
        out: Future[Any] = Future()

        def durable(f: Future[Any]) -> None:
            exc = f.exception()
            if exc is not None:
                self.tracker.discard(slot)
                stream.rollback_unacknowledged()
                if isinstance(exc, OutOfDisk):
                    self.disk.enter("wal", exc.path, exc.detail)
                else:  # the WAL's failure, not what this append was told of it (WalError.failure)
                    self.failed = self.failed or getattr(exc, "failure", None) or exc
                out.set_exception(exc)
                return
            slot.wal_start, slot.wal_next = f.result().offset, f.result().next_offset
            try:
                self.cache.append(rec)
            except ValueError as e:  # a bug: fail loudly and stop acknowledging
                self.failed = e
                log.error("log cache append failed", extra={"stream": rec.stream_id, "offset": rec.base_offset,
                                                            "error": str(e)})
                out.set_exception(WalError(f"the broker node failed: {e}"))
                return
            stream.confirmed_end = rec.last_offset
            if on_durable is not None:
                on_durable(rec)
            self.uploader.notify(self.cache.size)
            out.set_result(f.result())

        wal_fut.add_done_callback(durable)
        return out

    def check_room(self, body_bytes: int, records: int) -> None:
        """Refuse (OutOfDisk) up front when `records` appends of `body_bytes` in all would cross the floor."""
        self.disk.check_write("wal", body_bytes + records * WAL_HEADER_SIZE)

    def check_usable(self) -> None:
        """Raise unless the node may acknowledge now (asked before an append and again before answering it)."""
        if self.failed is not None:
            raise WalError(f"the broker node failed and acknowledges nothing more: {self.failed}")
        self.disk.check_writable()
        for check in self.ack_checks:
            check()

    def wait_for_cache_room(self, timeout: float = 30.0) -> None:
        """Back-pressure: wait while the cache holds more than its limit (object storage is behind)."""
        if self.cache.size <= self.max_cache_bytes:
            return
        self.uploader.notify(self.cache.size)
        deadline = time.monotonic() + timeout
        while self.cache.size > self.max_cache_bytes:
            if time.monotonic() > deadline:
                raise StorageUnavailable("broker", None, f"log cache holds {self.cache.size} bytes not yet uploaded "
                                                         f"(limit {self.max_cache_bytes}); object storage is behind")
            time.sleep(0.01)

    # -- reads ------------------------------------------------------------------------------------
    def read(self, sid: int, start: int, end: int, max_bytes: int = 1 << 20) -> Iterator[StreamRecord]:
        """Stream records covering [start, end) of any stream, in order (cache, block cache, objects). A read of
        a moved range not read from the previous owner's WAL yet waits for it (up to `BORROW_WAIT_S`)."""
        borrowed = self._borrowed.get(sid)
        if borrowed is not None and start < borrowed.end:
            borrowed.wait()
        pos = start
        misses = 0
        io = self.io.setdefault(sid, [0, 0, 0, 0])
        io[2] += 1
        while pos < end:
            recs = self.reader.read(sid, pos, end, max_bytes)
            recs = [r for r in recs if r.last_offset > pos]
            if not recs:
                misses += 1  # an upload moved data from the cache to objects between two looks
                if misses > 3:
                    return
                continue
            misses = 0
            for r in recs:
                if r.base_offset > pos:
                    log.error("gap in stream", extra={"stream": sid, "offset": pos, "next": r.base_offset})
                    return
                io[3] += len(r.payload)
                yield r
                pos = r.last_offset

    def cached_bytes(self, sid: int, above: int = -1) -> int:
        """Payload bytes of the stream's records in the log cache (not yet uploaded), ending after `above`."""
        return self.cache.stream_bytes(sid, above)

    # -- uploads ----------------------------------------------------------------------------------
    def start(self) -> None:
        self.uploader.start()
        self.disk.start()

    def force_upload(self) -> int:
        """Upload everything cached for the open streams, commit, drop it from the cache, trim the WAL.
        Returns the payload bytes uploaded."""
        with self._upload_lock:
            total = 0
            for _ in range(3):
                if self._commit_unknown:  # the last commit failed in a way that may have applied it: look
                    self.meta.catch_up()
                    self._commit_unknown = False
                snap = self._not_committed({sid: recs for sid, recs in self.cache.snapshot().items()
                                            if self._is_open(sid) and sid not in self._borrowed})
                if not snap:
                    break
                size = sum(len(r.payload) + RECORD_HEADER_SIZE for recs in snap.values() for r in recs)
                space = self.disk.short_of_room("objects", size)
                if space is not None:
                    # the local object store's filesystem would go under its floor: uploading would eat the room
                    # kept for a clean stop and a restart (also at the final upload of a clean stop, where the
                    # free space was just above the floor); the WAL keeps the records meanwhile
                    ep = self.disk.enter("objects", space.path, f"{space.free} bytes free, an upload of {size} "
                                                                f"bytes would cross the free-space floor of "
                                                                f"{space.floor} bytes", needed=size)
                    raise OutOfDisk(space.path, f"upload refused: {ep.detail}")
                try:
                    res = upload_batch(snap, self.store, self.meta, so_threshold=self.so_threshold)
                except (Fenced, StreamNotFound) as exc:  # fenced, or deleted with its topic
                    self.check_fenced(list(snap), exc)
                    continue
                except Exception as exc:
                    if is_out_of_space(exc):
                        self.disk.enter("objects", getattr(exc, "path", str(self.store.url)), f"upload failed: {exc}")
                    if not isinstance(exc, MetadataError):
                        self._commit_unknown = True
                    raise
                self.cache.mark_uploaded(res.uploaded)
                self.tracker.committed(res.uploaded)
                total += sum(len(r.payload) for recs in snap.values() for r in recs)
                log.debug("uploaded", extra={"streams": len(snap), "bytes": total,
                                             "stream_objects": [o.object_id for o in res.stream_objects],
                                             "object": res.stream_set_object.object_id
                                             if res.stream_set_object else None})
                break
            point = self.tracker.trim_point()
            if point is not None and point > self.wal.trim_offset:
                self.wal.trim(point)
            return total

    # -- moves over a shared WAL ---------------------------------------------------------------------
    def borrow(self, stream: Stream, end: int, load: Callable[[int], list[StreamRecord]],
               background: bool = True) -> None:
        """A stream just opened here whose offsets [its committed end, `end`) were acknowledged by its previous
        owner and are only in that node's shared WAL (a move): appends continue at `end` at once, `load(start)`
        reads the records (from `start`) into the cache in the background (now, without `background`), and
        until then reads of the range wait and the stream is not uploaded (its commits must continue the
        committed end). Raises WalError when the stream already holds records here."""
        sid = stream.stream_id
        with stream._lock:
            start = stream.next_offset
            if end <= start:
                return
            if self.cache.end_offset(sid) is not None or sid in self._borrowed:
                raise WalError(f"stream {sid}: cannot take the moved range [{start}, {end}): records are cached")
            b = BorrowedRange(sid, start, end)
            self._borrowed[sid] = b
            stream.next_offset = stream.confirmed_end = end
        if not background:
            try:
                self._fill(stream, b, load)
            except BaseException:
                self._borrowed.pop(sid, None)
                b.done.set()
                raise
            return
        threading.Thread(target=self._fill_until_done, args=(stream, b, load), name=f"broker-moved-range-{sid}",
                         daemon=True).start()

    def _fill_until_done(self, stream: Stream, b: BorrowedRange, load: Callable[[int], list[StreamRecord]]) -> None:
        backoff = 0.2
        while True:
            try:
                self._fill(stream, b, load)
                return
            except Exception as exc:  # noqa: BLE001 - the range stays unreadable; tried again
                log.error("reading a moved stream's records from its previous owner's WAL failed; retrying", extra={
                    "stream": b.stream_id, "offset": b.start, "end_offset": b.end,
                    "error": f"{type(exc).__name__}: {exc}", "retry_in_s": backoff})
                b.error = f"{type(exc).__name__}: {exc}"
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _fill(self, stream: Stream, b: BorrowedRange, load: Callable[[int], list[StreamRecord]]) -> None:
        started = time.monotonic()
        recs = [dataclasses.replace(r, epoch=stream.epoch) for r in b.pick(load(b.start))]
        if stream.closed or stream.fenced:
            self._borrowed.pop(b.stream_id, None)
            b.done.set()
            return
        self.cache.prepend(b.stream_id, recs)
        self._borrowed.pop(b.stream_id, None)
        b.done.set()
        self.uploader.request()  # until committed, the range lives only in the previous owner's WAL
        log.info("moved stream's records read from its previous owner's WAL", extra={
            "stream": b.stream_id, "offset": b.start, "end_offset": b.end, "records": len(recs),
            "bytes": sum(len(r.payload) for r in recs), "seconds": round(time.monotonic() - started, 3)})

    def borrowing(self, sid: int) -> bool:
        """Whether a moved range of the stream is still being read from its previous owner's WAL."""
        return sid in self._borrowed

    def lend(self, ends: dict[int, int]) -> None:
        """Streams just closed here whose records up to `end` may be only in this node's shared WAL: the next
        owner reads them from there, so their WAL records stay until the metadata shows the stream committed up
        to `end` (`release_lent`). Their cached copies are dropped now."""
        self.holds.lend(ends)
        self.cache.mark_uploaded(dict.fromkeys(ends, _FAR))

    def release_lent(self) -> None:
        """Let the WAL trim the records of the streams held for others that are due (broker/streams/wal_holds.py)."""
        done, abandoned = self.holds.due()
        if not done and not abandoned:
            return
        self.tracker.committed(done)
        self.tracker.release(abandoned)
        if self._upload_lock.acquire(blocking=False):  # else the upload under way trims
            try:
                point = self.tracker.trim_point()
                if point is not None and point > self.wal.trim_offset:
                    self.wal.trim(point)
            finally:
                self._upload_lock.release()

    def _not_committed(self, snap: dict[int, list[StreamRecord]]) -> dict[int, list[StreamRecord]]:
        """The cached records not yet committed, by stream. Those the metadata already holds (a commit applied
        although it reported a failure, as when the connection is lost at COMMIT) leave the cache: uploaded again,
        their commit would be refused for good (they no longer continue the stream) and the cache never drain."""
        applied: dict[int, int] = {}
        out: dict[int, list[StreamRecord]] = {}
        for sid, recs in snap.items():
            try:
                end = self.meta.get_stream(sid, refresh=False).end_offset
            except StreamNotFound:
                end = -1  # deleted: check_fenced drops it at the commit
            if recs and recs[0].base_offset < end:
                applied[sid] = end
                log.warning("records found committed already: dropped from the cache", extra={
                    "stream": sid, "offset": recs[0].base_offset, "committed_end": end})
                recs = [r for r in recs if r.last_offset > end]
            if recs:
                out[sid] = recs
        if applied:
            self.cache.mark_uploaded(applied)
            self.tracker.committed(applied)
        return out

    def flush(self, timeout: float | None = 120.0) -> None:
        """Upload what the cache holds now, on the uploader thread, and wait for it."""
        self.uploader.upload_now(timeout)

    def _is_open(self, sid: int) -> bool:
        s = self._open.get(sid)
        return s is not None and not s.fenced

    def check_fenced(self, sids: list[int], exc: Exception) -> list[Stream]:
        """A commit of these streams was fenced: find which streams this node lost, abandon them and report
        them through `on_lost`. A newer incarnation of this node having registered loses every stream."""
        self.meta.catch_up()
        node = self.meta.image.nodes.get(self.meta.node_id)
        node_fenced = node is None or node.epoch != self.meta.node_epoch
        candidates = list(self._open) if node_fenced else sids
        lost = []
        for sid in candidates:
            s = self._open.get(sid)
            if s is None or s.fenced:
                continue
            m = self.meta.image.streams.get(sid)
            if m is None:  # deleted (its topic was deleted): nothing of it is uploaded any more
                lost.append(s)
                log.info("stream deleted: its cached records are dropped", extra={"stream": sid, "epoch": s.epoch})
                continue
            if node_fenced or not self._still_open(s):
                lost.append(s)
                log.error("stream fenced: another owner holds it", extra={
                    "stream": sid, "epoch": s.epoch, "current_epoch": m.epoch, "owner": m.owner, "error": str(exc)})
        if lost:
            self.abandon(lost)
            self.on_lost(lost, exc)
        return lost

    def stop(self) -> None:
        """Stop the uploader thread."""
        self.uploader.stop()

    def close(self) -> None:
        self.disk.stop()
        self.reader.close()
        self.wal.close()

    @property
    def recovered_records(self) -> list[tuple[WalRecord, StreamRecord]]:
        return list(self._recovered)
