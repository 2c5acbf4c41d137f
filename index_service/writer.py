"""The writer thread: buffers puts in memory and writes them to the WRITING file in batches.

- `submit` (called by put/put_batch on any thread) appends to an in-memory list and returns; it only
  waits when `max_pending` records are buffered (back-pressure), never on compaction or upload.
- The thread takes the whole buffer every `flush_interval_ms` (or sooner once `write_batch`
  records wait), drops re-dispatched records (see checkpoint.py) and writes the rest with
  `NativeIndexWriter.put_batch` (queryable from then on), a submitted batch at a time with the columns
  put_batch made of it (small batches joined into groups of `write_batch`: batch_spans.write_groups). It
  syncs the file and saves the checkpoint at most every `checkpoint_interval_ms` while writes go on, and at
  once when a `flush()` waits, a roll or a forget is served, or the writer stops: a sync and two fsyncs per
  batch cost more than the batch itself. `flush()` waits until everything submitted before it is written,
  synced and checkpointed.
- Out of disk (ENOSPC, EDQUOT, EIO while writing the file, creating the next one or saving the checkpoint)
  does not stop the thread: what the file does not hold yet goes back to the front of the buffer, the
  thread retries every `OUT_OF_SPACE_RETRY_S` until the write goes through, `blocked` says why meanwhile,
  queries go on, and `flush()` raises `IndexOutOfSpace` instead of waiting for a write that cannot happen.
- When the file is full, or the background thread asks (the file is older than `roll_age_ms`),
  the writer seals it, creates the next file
  (begin time strictly after the old one's) through the scratch folder, saves a checkpoint naming the
  new file, and only then hands the sealed file to the background thread (state SEALED).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

import xxhash

from index_file import NativeIndexWriter
from index_service import ranges
from index_service.batch_spans import Columns, Spans, fresh_spans, widen, write_groups
from index_service.checkpoint import CheckpointStore, QueueKey, TailKey
from index_service.config import ServiceConfig
from index_service.file_map import FileMap
from index_service.managed_file import ManagedFile
from index_service.model import FileState
from index_service.state_folders import StateFolders, file_name
from storage_tier.disk_space import is_out_of_space

log = logging.getLogger("mqindex.index_service.writer")

Record = tuple[str, int, int, int, int, Sequence[str]]  # topic, queue_id, offset, size, store_time_ms, keys

_xxh3 = xxhash.xxh3_64_intdigest


OUT_OF_SPACE_RETRY_S = 0.5


class WriterError(RuntimeError):
    """The writer thread failed; the records it held were not indexed (the checkpoint did not move)."""


class IndexOutOfSpace(WriterError):
    """The index folders are out of disk: the buffered records are not written yet (retried on their own)."""


class Writer:
    def __init__(self, config: ServiceConfig, folders: StateFolders, files: FileMap, checkpoints: CheckpointStore,
                 current: ManagedFile | None, tail: set[TailKey], on_sealed: Callable[[ManagedFile], None],
                 tail_files: Sequence[ManagedFile] = ()) -> None:
        self.config = config
        self.folders = folders
        self.files = files
        self.checkpoints = checkpoints
        self.current = current
        #: recovery's dedup set of items beyond the checkpoint; an entry goes once a checkpoint covers the
        #: re-dispatched record that found it, and every checkpoint saved meanwhile carries what is left
        self.tail = tail
        self.tail_files = list(tail_files)  # files holding items beyond the checkpoint (recovery)
        self.on_sealed = on_sealed
        ck = checkpoints.current
        self.accepted: dict[QueueKey, int] = dict(ck.offsets)  # highest offset taken per queue
        self.durable: dict[QueueKey, int] = dict(ck.offsets)  # highest offset written (saved by the next checkpoint)
        self._pending: list[Record] = []
        #: entry_columns of _pending, one per submitted batch; None once a record came without them
        self._pending_cols: list[Columns] | None = []
        self._submitted = 0
        self._written = 0
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._roll_requested: str | None = None
        self._forget: list[tuple[str, frozenset[int] | None]] = []  # queues to forget after the pending batch
        self._forgets_requested = 0
        self._forgets_done = 0
        self._stop = False
        self.error: BaseException | None = None
        self.blocked: BaseException | None = None  # the out-of-disk error of the last attempt, while it lasts
        self._tries = 0  # the writer's tries so far (a try: one turn taking the pending records)
        self._refused_try = 0  # the number of the last try refused for lack of space
        #: a file a roll sealed and took off `current` but has not handed to the background yet (a step after
        #: sealing failed for lack of disk: the roll is finished before anything else is written)
        self._rolled: ManagedFile | None = None
        self._flushes_waiting = 0  # flush() calls waiting: the checkpoint is saved at once
        self._dirty = False  # records taken since the last saved checkpoint
        self._last_save = time.monotonic()
        self.skipped = 0  # re-dispatched records dropped
        self._thread = threading.Thread(target=self._run, name="mqindex-writer", daemon=True)

    # -- caller side -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, records: list[Record], columns: Columns | None = None) -> None:
        with self._lock:
            self._raise_if_failed()
            while len(self._pending) >= self.config.max_pending and not self._stop:
                self._wake.set()
                self._done.wait(1.0)
                self._raise_if_failed()
            if self._stop:
                raise RuntimeError("the index service is closed")
            self._pending.extend(records)
            if self._pending_cols is not None and columns is not None:
                self._pending_cols.append(columns)
            else:
                self._pending_cols = None
            self._submitted += len(records)
            if len(self._pending) >= self.config.write_batch:
                self._wake.set()

    def submit_one(self, record: Record) -> None:
        with self._lock:
            if self.error is not None or self._stop or len(self._pending) >= self.config.max_pending:
                pass  # slow path below
            else:
                self._pending.append(record)
                self._pending_cols = None
                self._submitted += 1
                if len(self._pending) >= self.config.write_batch:
                    self._wake.set()
                return
        self.submit([record])

    def flush(self, timeout: float | None = 60.0) -> None:
        """Wait until every record submitted before this call is written (queryable)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._submitted
            tried = self._tries  # a try begun after this one sees the disk as it is now
            self._flushes_waiting += 1
            self._wake.set()
            try:
                while self._written < target:
                    self._raise_if_failed()
                    # a try begun for this flush failed (not one begun earlier, while the disk may still have
                    # been full, that failed after the flush began: space may have returned in between)
                    if self.blocked is not None and self._refused_try > tried:
                        raise IndexOutOfSpace(f"index writes wait for disk space: {self.blocked}")
                    if not self._thread.is_alive():
                        raise WriterError("the writer thread is not running")
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"flush: {target - self._written} records still unwritten after {timeout}s")
                    self._done.wait(0.5 if left is None else min(left, 0.5))
                self._raise_if_failed()
            finally:
                self._flushes_waiting -= 1

    def request_roll(self, reason: str, wait: bool = True, timeout: float = 60.0) -> None:
        with self._lock:
            self._roll_requested = reason
            self._wake.set()
            if not wait:
                return
            deadline = time.monotonic() + timeout
            while self._roll_requested is not None and self._thread.is_alive():
                self._raise_if_failed()
                if time.monotonic() > deadline:
                    raise TimeoutError("roll request not served")
                self._done.wait(0.5)

    def forget(self, topic: str, queue_ids: Sequence[int] | None = None, timeout: float = 60.0) -> None:
        """Drop the checkpointed offsets of `topic`'s queues (all, or `queue_ids`) once every record submitted
        before this call is written: the topic was deleted, and a topic created again under its name starts
        at offset 0, so its records must not be taken for re-sent ones. Returns once the checkpoint is saved."""
        with self._lock:
            self._raise_if_failed()
            self._forget.append((topic, None if queue_ids is None else frozenset(queue_ids)))
            self._forgets_requested += 1
            target = self._forgets_requested
            self._wake.set()
            deadline = time.monotonic() + timeout
            while self._forgets_done < target:
                self._raise_if_failed()
                if not self._thread.is_alive():
                    raise WriterError("the writer thread is not running")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"forgetting the queues of {topic!r} not done after {timeout}s")
                self._done.wait(0.5)

    def _apply_forget(self, forget: list[tuple[str, frozenset[int] | None]]) -> None:
        def gone(k: QueueKey) -> bool:
            return any(k[0] == t and (qs is None or k[1] in qs) for t, qs in forget)

        for k in [k for k in self.accepted if gone(k)]:
            del self.accepted[k]
        for k in [k for k in self.durable if gone(k)]:
            del self.durable[k]
        if self.tail:
            # which topic an entry belongs to is not known (a fingerprint of topic#key): a topic created again
            # under the name must not find its records taken for re-sent ones, and an entry of a deleted topic
            # would never be re-dispatched and so never leave. Entries of other topics not re-dispatched yet
            # go as well: their records are then indexed again (found twice), never lost.
            log.warning("index re-dispatch dedup set dropped: queues forgotten", extra={
                "topics": sorted({t for t, _ in forget}), "entries": len(self.tail)})
            self.tail.clear()
            self.tail_files = []
        ck = self.checkpoints.current
        mf = self.current
        if self._dirty:
            self._save()  # with what was written since the last one (the file synced first)
        else:
            self._save_checkpoint(ck.writing, ck.items, mf.ranges if mf is not None else ck.ranges)
        log.info("index queues forgotten", extra={"topics": sorted({t for t, _ in forget}),
                                                  "file": mf.stem if mf is not None else None})

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._wake.set()
            self._done.notify_all()
        self._thread.join()

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise WriterError(f"index writer failed: {self.error}") from self.error

    # -- writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        interval = self.config.flush_interval_ms / 1000.0
        save_every = self.config.checkpoint_interval_ms / 1000.0
        while True:
            self._wake.wait(OUT_OF_SPACE_RETRY_S if self.blocked is not None else interval)
            self._wake.clear()
            with self._lock:
                self._tries += 1
                this_try = self._tries
                batch, self._pending = self._pending, []
                cols, self._pending_cols = self._pending_cols, []
                target = self._submitted
                stopping = self._stop
                roll = self._roll_requested
                forget, self._forget = self._forget, []
                save_now = stopping or self._flushes_waiting > 0
            try:
                if batch:
                    for records, columns in write_groups(batch, cols, self.config.write_batch):
                        self._write(records, columns)
                if roll is not None:
                    self._roll(roll)
                if forget:
                    self._apply_forget(forget)
                    with self._lock:
                        self._forgets_done += len(forget)
                        self._done.notify_all()
                if self._dirty and (save_now or self.blocked is not None
                                    or time.monotonic() - self._last_save >= save_every):
                    self._save()
            except BaseException as exc:  # noqa: BLE001 - reported to every caller from now on
                if is_out_of_space(exc) and not stopping:
                    self._hold_for_space(batch, exc, this_try)
                    with self._lock:
                        self._forget[:0] = forget  # after the held records, once space returns
                    continue
                log.exception("index writer failed", extra={"file": self.current.stem if self.current else None,
                                                            "state": "WRITING"})
                with self._lock:
                    self.error = exc
                    self._roll_requested = None
                    self._done.notify_all()
                return
            if self.blocked is not None:
                log.info("index writes resumed: disk space returned", extra={"path": str(self.folders.root)})
            with self._lock:
                self.blocked = None
                if not self._dirty:  # everything taken so far is covered by the saved checkpoint
                    self._written = target
                if roll is not None and self._roll_requested == roll:
                    self._roll_requested = None
                self._done.notify_all()
                if stopping and not self._pending:
                    return

    def _hold_for_space(self, batch: list[Record], exc: BaseException, this_try: int) -> None:
        """Out of disk: go back to the last saved checkpoint's view and keep the records it does not cover at
        the front of the buffer, to be written once space returns."""
        # durable: what the file holds (the saved checkpoint plus the batches written since); the failed
        # batch is not in it unless only the checkpoint save failed, and then the batch is in the file
        self.accepted = dict(self.durable)
        keep = [r for r in batch if r[2] > self.durable.get((r[0], r[1]), -1)]
        if self.blocked is None:
            log.error("index writes wait for disk space", extra={
                "path": str(self.folders.root), "file": self.current.stem if self.current else None,
                "records": len(keep), "error": str(exc)})
        with self._lock:
            self.blocked = exc
            self._refused_try = this_try
            self._pending[:0] = keep
            self._pending_cols = None
            self._done.notify_all()

    def _write(self, batch: list[Record], cols: Columns | None = None) -> None:
        accepted = self.accepted
        recs: list[Record] = []
        # taken but nothing to write (no keys, or every key already in the file: the recovered tail), each with
        # how many records to write come before it: a roll part way through the batch notes in its checkpoint
        # those before the roll point, and only those (the checkpoint naming the next file must cover every
        # item of the sealed one, and nothing the batch has not written yet)
        extra: list[Record] = []
        extra_at: list[int] = []
        dropped: list[Record] = []
        # the tail entries a record found, each with how many records to write must be written (and noted)
        # before it leaves the tail: the checkpoint carrying the tail must cover the record of any entry gone
        consumed: list[tuple[int, list[TailKey]]] = []
        skipped = 0
        spans = None if self.tail else fresh_spans(batch, accepted, cols)
        if spans is not None:  # every record new and keyed: bookkeeping per queue, not per record
            accepted.update((k, hi) for k, (_lo, hi) in spans.items())
            recs = batch
        else:
            tail = self.tail
            for r in batch:
                k = (r[0], r[1])
                last = accepted.get(k)
                if last is not None and r[2] <= last:
                    skipped += 1
                    continue
                accepted[k] = r[2]
                if r[5] and tail:
                    kept, found = self._tail_missing(r)
                    if kept is None:  # every key already written beyond the checkpoint
                        dropped.append(r)
                        extra.append(r)
                        extra_at.append(len(recs))
                        consumed.append((len(recs), found))
                        continue
                    if found:
                        consumed.append((len(recs) + 1, found))  # once the missing keys are written
                    r = kept
                if r[5]:
                    recs.append(r)
                else:
                    extra.append(r)
                    extra_at.append(len(recs))
        if dropped:
            skipped += len(dropped)
            self._extend_tail_ranges(dropped)
        self.skipped += skipped
        i = 0
        done = 0  # records of the batch written to files rolled before `recs`
        noted = 0  # extras noted by a roll's checkpoint
        gone = 0  # consumed entries out of the tail
        while i < len(recs):
            mf = self._ensure_file()
            w: NativeIndexWriter = mf.form
            if spans is not None and cols is not None:
                n = w.put_batch(recs[i:] if i else recs, cols.slice(i) if i else cols)
            else:
                n = w.put_batch(recs[i:] if i else recs)
            whole = spans is not None and i == 0 and n == len(recs)
            # the part before a roll is fresh as well: its own spans, for the file's ranges and the checkpoint
            part = None if whole or spans is None or cols is None or not n else \
                fresh_spans(recs[i:i + n], {}, cols.slice(i, i + n))
            if mf.ranges is not None:
                if whole:
                    widen(mf.ranges, spans)  # type: ignore[arg-type]
                elif part is not None:
                    widen(mf.ranges, part)
                else:
                    ranges.extend(mf.ranges, recs[i:i + n])
            i += n
            if i < len(recs):
                if n == 0 and w.item_count == 0:
                    r = recs[i]
                    raise ValueError(f"record {r[0]}/{r[1]}@{r[2]} has more keys than a file holds "
                                     f"({self.config.max_items} items)")
                upto = noted
                while upto < len(extra) and extra_at[upto] <= done + i:
                    upto += 1
                gone = self._consume_tail(consumed, gone, done + i)  # noted by the roll's commit, first thing
                self._roll("full", written=recs[:i], spans=part, extra=extra[noted:upto])
                noted = upto
                if cols is not None:
                    cols = cols.slice(i)
                recs, i, done = recs[i:], 0, done + i
        self._commit(recs, extra[noted:], spans)
        if consumed:
            self._consume_tail(consumed, gone, done + len(recs))

    def _consume_tail(self, consumed: list[tuple[int, list[TailKey]]], start: int, written: int) -> int:
        """Take out of the tail the entries of `consumed[start:]` whose record is noted once `written` records
        of the batch are; returns the index of the first entry left."""
        i = start
        tail = self.tail
        while i < len(consumed) and consumed[i][0] <= written:
            tail.difference_update(consumed[i][1])
            i += 1
        if i > start and not tail:
            log.info("index re-dispatch dedup finished: every item beyond the recovered checkpoint came back",
                     extra={"files": [mf.stem for mf in self.tail_files]})
            self.tail_files = []
        return i

    def _tail_missing(self, r: Record) -> tuple[Record | None, list[TailKey]]:
        """Recovery dedup: the record with only its keys not already written beyond the checkpoint (the record
        itself when none is there; None when every key is there), and the tail entries of the keys found."""
        topic, q, off = r[0], r[1], r[2]
        keys = [r[5]] if isinstance(r[5], str) else list(r[5])
        tail = self.tail
        missing: list[str] = []
        found: list[TailKey] = []
        for k in keys:
            t = (_xxh3(f"{topic}#{k}".encode()), q, off)
            if t in tail:
                found.append(t)
            else:
                missing.append(k)
        if not found:
            return r, found
        if missing:
            return (r[0], r[1], r[2], r[3], r[4], missing), found
        return None, found

    def _extend_tail_ranges(self, dropped: list[Record]) -> None:
        """Re-dispatched records found already written beyond the checkpoint: which recovered file holds
        them is not known (items carry no topic), so every such file's ranges take them (an over-wide
        range only keeps a file longer, never expires it early)."""
        if not dropped:
            return
        for mf in self.tail_files:
            if mf.ranges is None:
                continue
            ranges.extend(mf.ranges, dropped)
            if mf is not self.current:
                ranges.save(self.folders, mf.stem, mf.ranges)

    def _commit(self, recs: list[Record], extra: Sequence[Record] = (), spans: Spans | None = None) -> None:
        """Note recs as written (and extra: records taken with nothing left to write) in the offsets the next
        checkpoint saves. `spans`: recs's highest offset per queue, when the fast path computed it (taken
        offsets rise per queue, so the last one is the highest)."""
        if not recs and not extra:
            return
        durable = self.durable
        if spans is not None:
            durable.update((k, hi) for k, (_lo, hi) in spans.items())
        else:
            for r in recs:
                durable[(r[0], r[1])] = r[2]
        for r in extra:
            k = (r[0], r[1])
            durable[k] = max(durable.get(k, -1), r[2])
        self._dirty = True

    def _save(self) -> None:
        """Sync the WRITING file and save the checkpoint covering everything written so far."""
        mf = self.current
        if mf is None:
            self._save_checkpoint(self.checkpoints.current.writing, self.checkpoints.current.items)
        else:
            if self.config.sync_writes:
                mf.form.sync()
            self._save_checkpoint(mf.stem, mf.form.item_count, mf.ranges)
        self._saved()

    def _save_checkpoint(self, writing: str | None, items: int, file_ranges: ranges.Ranges | None = None) -> None:
        """The offsets written so far, the WRITING file's count and ranges, and what is left of the tail."""
        if self.tail:
            self.checkpoints.save(self.durable, writing, items, file_ranges, tail=self.tail,
                                  tail_files=[mf.stem for mf in self.tail_files])
        else:
            self.checkpoints.save(self.durable, writing, items, file_ranges)

    def _saved(self) -> None:
        self._dirty = False
        self._last_save = time.monotonic()

    def _ensure_file(self) -> ManagedFile:
        """The WRITING file to write to: a roll that stopped half way (out of disk after sealing) is finished
        first, so a sealed file is never written to."""
        mf = self.current
        if self._rolled is not None or (mf is not None and mf.form.sealed):
            self._roll("resumed")
            mf = self.current
        return mf if mf is not None else self._new_file()

    def _new_file(self) -> ManagedFile:
        last = self.files.last_native_begin()
        begin = max(self.config.clock(), last + 1 if last is not None else 0)
        stem = file_name(begin)
        scratch = self.folders.scratch(stem + ".mqxu")
        scratch.unlink(missing_ok=True)
        w = NativeIndexWriter.create(scratch, begin, self.config.slots, self.config.max_items)
        dest = self.folders.unsealed(stem)
        self.folders.publish(scratch, dest)  # fsync, rename into writing/, fsync the folder
        w.path = str(dest)
        mf = ManagedFile(stem, begin, FileState.WRITING, w, str(dest))
        mf.ranges = {}
        self.files.add(mf)
        self.current = mf
        log.info("new writing file", extra={"file": stem, "state": "WRITING", "begin_ms": begin})
        return mf

    def _roll(self, reason: str, written: list[Record] | None = None, spans: Spans | None = None,
              extra: Sequence[Record] = ()) -> None:
        """Seal the WRITING file and start the next; `written`: the records of the batch being written that the
        full file took (with `spans`, their spans when fresh), and `extra`: the records before the roll point
        with nothing to write (already in the file, or keyless), noted in the checkpoint saved before sealing.

        Every step may fail for lack of disk (the batch then goes back to the buffer and is tried again): a
        sealed `current` is a roll stopped after sealing, `_rolled` one stopped after taking the sealed file off
        `current`; calling this again (`_ensure_file` does before any write) carries on from there."""
        mf = self.current
        if mf is not None and (mf.form.item_count or mf.form.sealed):
            if written or extra:
                self._commit(written or [], extra, spans=spans)
            if not mf.form.sealed:
                if self._dirty:
                    self._save()  # the file is whole in the checkpoint before it is sealed: a crash leaves no tail
                mf.form.seal()
            if mf.ranges is not None:
                ranges.save(self.folders, mf.stem, mf.ranges)  # before the checkpoint stops naming the file
            log.info("sealed", extra={"file": mf.stem, "state": "SEALED", "reason": reason,
                                      "items": mf.form.item_count})
            if self.config.crash_hook is not None:
                self.config.crash_hook("roll:sealed")
            self._rolled, self.current = mf, None
        mf = self._rolled
        if mf is None:
            return
        nxt = self.current if self.current is not None else self._new_file()
        # the checkpoint names the new file before the sealed one may be compacted (recovery reads
        # the tail of the file the checkpoint names); nothing is written to it before this save
        self._save_checkpoint(nxt.stem, 0)  # the tail left goes on in it: its items are in the sealed file
        self._saved()
        self._rolled = None
        mf.state = FileState.SEALED
        mf.size_bytes = os.path.getsize(self.folders.unsealed(mf.stem))
        mf.refresh()
        self.on_sealed(mf)
