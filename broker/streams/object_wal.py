"""ObjectWal: the WAL on shared storage (AutoMQ's "S3 WAL"), so another node can replay it after a crash.

Each group commit is one object `wal/node-<id>/<start offset, 20 digits>` in a BlobStore (S3, PostgreSQL,
any store URL), holding the same records as the local WAL (broker/streams/wal.py: 24-byte header with
magic, body length, body offset, body CRC32 and header CRC32, then the body) at WAL byte offsets that
continue from object to object. An append is acknowledged only after its object is stored AND
`before_ack()` confirmed that this node has not been fenced meanwhile (a survivor fences a dead node in
the metadata before it lists the node's WAL, so a write that was acknowledged was stored before that
listing and is replayed). Trim deletes the objects wholly below the trim offset; an object whose delete
failed stays listed and is deleted by the next trim. Recovery (and a survivor's replay) lists the prefix and
reads the objects in offset order. Objects are written one after the other and deleted from the oldest, so
the WAL is the run of contiguous objects that ends at the newest: a gap below it is left by a trim cut short
(a delete that failed or a crash in the middle of one) and what lies below the gap was trimmed, i.e.
committed; recovery starts after the last gap. It stops at the first invalid record.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from broker.errors import WalError
from broker.streams.wal import (
    DEFAULT_MAX_BODY,
    HEADER_SIZE,
    AppendResult,
    PendingAppend,
    RecoveryReport,
    WalRecord,
    encode_record,
    scan_records,
)
from storage_tier import BlobStore
from storage_tier.errors import BlobNotFound

log = logging.getLogger("mqindex.broker.wal")

DEFAULT_MAX_BATCH = 4 << 20


def wal_prefix(node_id: int) -> str:
    return f"wal/node-{node_id}/"


def _key(prefix: str, offset: int) -> str:
    return f"{prefix}{offset:020d}"


#: how long a reader re-lists a WAL whose listed objects are being deleted (a survivor trimming what it replayed)
DELETED_WHILE_READ_S = 30.0


def read_wal(store: BlobStore, node_id: int, max_body: int = DEFAULT_MAX_BODY
             ) -> tuple[list[WalRecord], RecoveryReport, list[tuple[int, int, str]]]:
    """Every valid record of a node's shared WAL in order, the report, and its objects (start, end, key): those
read, and those left below a gap by a trim cut short (to be deleted; their end is the next object's start).

An object listed but gone when read was deleted meanwhile: a survivor that fenced this node and replayed its WAL
trims it from the oldest (a node restarted while it is failed over reads its WAL at the same time). The WAL is
then listed and read again, until a read finds every listed object or DELETED_WHILE_READ_S has passed."""
    deadline = time.monotonic() + DELETED_WHILE_READ_S
    while True:
        try:
            return _read_listed(store, node_id, max_body)
        except BlobNotFound as exc:
            if time.monotonic() >= deadline:
                raise
            log.warning("shared WAL: an object was deleted while it was read; listing the WAL again",
                        extra={"node_id": node_id, "object": exc.key})
            time.sleep(0.2)


def _read_listed(store: BlobStore, node_id: int, max_body: int
                 ) -> tuple[list[WalRecord], RecoveryReport, list[tuple[int, int, str]]]:
    prefix = wal_prefix(node_id)
    objects = []
    for key in store.list(prefix):
        tail = key[len(prefix):]
        if tail.isdigit():
            objects.append((int(tail), key))
    objects.sort()
    records: list[WalRecord] = []
    spans: list[tuple[int, int, str]] = []
    reason = ""
    start = objects[0][0] if objects else 0
    pos = start
    for i, (offset, key) in enumerate(objects):
        if offset != pos:
            if offset < pos:
                reason = f"object {key} starts at {offset}, inside the object before it (ends at {pos})"
                break
            # a gap: everything read so far lies below a trim point (see the module doc), so it is committed
            log.warning("shared WAL: objects below a gap were trimmed; recovery starts after the gap",
                        extra={"node_id": node_id, "object": key, "offset": offset, "expected": pos,
                               "objects_below": i})
            spans = [(o, objects[j + 1][0], k) for j, (o, k) in enumerate(objects[:i])]
            records, start = [], offset
        data = store.get(key)
        recs, end, why = scan_records(data, offset, offset, max_body, f"shared WAL object {key}")
        records += recs
        spans.append((offset, end, key))
        pos = end
        if why or end != offset + len(data):
            reason = f"{key} at offset {end}: {why or 'trailing bytes'}"
            break
    return records, RecoveryReport(start, pos, len(records), 0, reason), spans


class ObjectWal:
    directory = None  # no local folder: nothing for the disk-space watch

    def __init__(self, store: BlobStore, node_id: int, *, max_body: int = DEFAULT_MAX_BODY,
                 max_batch: int = DEFAULT_MAX_BATCH, before_ack: Callable[[], None] | None = None) -> None:
        self.store = store
        self.node_id = node_id
        self.prefix = wal_prefix(node_id)
        self.max_body = max_body
        self.max_batch = max_batch
        self.before_ack = before_ack or (lambda: None)
        self.fsyncs = 0  # group commits stored
        self.fsync_observer: Callable[[float], None] | None = None
        self.recovered, self.report, spans = read_wal(store, node_id, max_body)
        self._objects = list(spans)
        self._trim = self.report.trim_offset
        self._next = self.report.end_offset
        if self.report.stop_reason:
            log.error("shared WAL replay stopped early", extra={"node_id": node_id, "reason": self.report.stop_reason})
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[PendingAppend] = []
        self._closing = False
        self._failed: BaseException | None = None
        self._writer = threading.Thread(target=self._run, name="broker-wal-objects", daemon=True)
        self._writer.start()

    @classmethod
    def open(cls, store: BlobStore, node_id: int, **kw: object) -> ObjectWal:
        return cls(store, node_id, **kw)  # type: ignore[arg-type]

    @property
    def next_offset(self) -> int:
        with self._lock:
            return self._next

    @property
    def trim_offset(self) -> int:
        return self._trim

    def append_async(self, body: bytes) -> Future[AppendResult]:
        if len(body) > self.max_body:
            raise WalError(f"WAL body of {len(body)} bytes exceeds the {self.max_body}-byte limit")
        p = PendingAppend(bytes(body))
        with self._cond:
            if self._closing:
                raise WalError("the WAL is closed")
            if self._failed is not None:
                raise WalError(f"the WAL failed: {self._failed}")
            self._queue.append(p)
            self._cond.notify_all()
        return p.future

    def append(self, body: bytes, timeout: float | None = None) -> AppendResult:
        return self.append_async(body).result(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                batch, size = [], 0
                while self._queue and (not batch or size + HEADER_SIZE + len(self._queue[0].body) <= self.max_batch):
                    p = self._queue.pop(0)
                    batch.append(p)
                    size += HEADER_SIZE + len(p.body)
            try:
                results = self._write(batch)
            except BaseException as exc:  # noqa: BLE001 - the batch is not acknowledged; nothing after it either
                log.error("shared WAL write failed; the node acknowledges nothing more", extra={
                    "node_id": self.node_id, "error": f"{type(exc).__name__}: {exc}"})
                with self._cond:
                    self._failed = exc
                    rest, self._queue = self._queue, []
                # the failed write's object may be stored (a restart or a survivor replays it); the rest were not
                failure = WalError(f"shared WAL write failed: {exc}")
                for p in batch:
                    p.future.set_exception(WalError(f"{failure}; the records of this write may or may not be kept (the "
                                                    "WAL is replayed from what its store holds)", failure))
                for p in rest:
                    p.future.set_exception(WalError(f"{failure}; these records were not written", failure))
                continue
            for p, r in zip(batch, results, strict=True):
                p.future.set_result(r)

    def _write(self, batch: list[PendingAppend]) -> list[AppendResult]:
        started = time.perf_counter()
        offset = self._next
        buf = bytearray()
        results = []
        for p in batch:
            start = offset + len(buf)
            buf += encode_record(start, p.body)
            results.append(AppendResult(start, start + HEADER_SIZE + len(p.body)))
        key = _key(self.prefix, offset)
        self.store.put(key, bytes(buf))
        self.before_ack()  # fenced meanwhile: not acknowledged (a survivor may have listed the WAL already)
        with self._lock:
            self._objects.append((offset, offset + len(buf), key))
            self._next = offset + len(buf)
        self.fsyncs += 1
        if self.fsync_observer is not None:
            self.fsync_observer(time.perf_counter() - started)
        return results

    def objects_of(self, ranges: list[tuple[int, int]]) -> list[tuple[str, int, int]]:
        """The objects holding the WAL ranges [start, next) (each within one object, as a record is): (key,
        start, next), the ranges of one object merged. Raises WalError for a range no object holds."""
        with self._lock:
            objects = list(self._objects)
        out: list[tuple[str, int, int]] = []
        starts = [o[0] for o in objects]
        for lo, hi in ranges:
            i = bisect.bisect_right(starts, lo) - 1
            if i < 0 or not objects[i][0] <= lo < hi <= objects[i][1]:
                raise WalError(f"WAL range [{lo}, {hi}) of node {self.node_id} is in no stored object")
            key = objects[i][2]
            if out and out[-1][0] == key and out[-1][2] == lo:
                out[-1] = (key, out[-1][1], hi)
            else:
                out.append((key, lo, hi))
        return out

    def trim(self, offset: int) -> None:
        """Delete the objects wholly below `offset` (a record boundary). They are forgotten once deleted: when
        the delete fails, they stay listed and the next trim deletes them (before, a failed delete left them in
        the store below a gap that recovery stopped at, so the records above the gap were not replayed)."""
        with self._lock:
            if offset < self._trim or offset > self._next:
                raise WalError(f"trim offset {offset} outside [{self._trim}, {self._next}]")
            gone = [o for o in self._objects if o[1] <= offset]
        if gone:
            self.store.delete([k for _, _, k in gone])
        with self._lock:
            deleted = {k for _, _, k in gone}
            self._objects = [o for o in self._objects if o[2] not in deleted]
            self._trim = max(self._trim, offset)

    def paused(self) -> None:
        return None

    def resume(self) -> bool:
        return True

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._writer.join()
