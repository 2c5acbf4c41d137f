"""IndexService: the tiered index embedded in a broker (and served over HTTP by api/).

    svc = IndexService.open(data_dir, store="file:///...", **config)   # recovers from state folders
    svc.put(topic, queue_id, offset, size, keys, store_time_ms, msg_id=None)
    svc.put_batch(records)            # IndexEntry or (topic, queue_id, offset, size, store_time_ms, keys)
    svc.flush()                       # everything put so far is queryable (and checkpointed)
    svc.query(topic, key, max_count=64, begin_ms=0, end_ms=None) -> list[IndexHit]   # newest first
    svc.files() -> list[FileInfo]
    svc.checkpoint(topic, queue_id) -> int | None   # highest durably indexed offset
    svc.forget_queues(topic)          # a deleted topic: its name may come back with offsets from 0
    svc.maintain()                    # one background cycle now: roll/compact/upload/expire
    svc.close()

Threads: the writer (writer.py), a query pool (`query_threads`), the background (background.py).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from index_file import IndexEntry, IndexHit
from index_file.entry_columns import EntryColumns, entry_columns
from index_file.model import check_range
from index_service.background import Background, CycleReport
from index_service.checkpoint import CheckpointStore, QueueKey
from index_service.config import ServiceConfig
from index_service.external_builds import adopt_builds
from index_service.file_map import FileMap
from index_service.key_filters import FilterCache
from index_service.lifecycle import Lifecycle
from index_service.lookup_stats import LookupStats
from index_service.managed_file import ManagedFile
from index_service.model import FileInfo, FileState
from index_service.query import QueryStats, run_query
from index_service.recovery import RecoveryReport, recover
from index_service.rocketmq_import import Registered, load_imported, register_directory
from index_service.state_folders import StateFolders
from index_service.writer import IndexOutOfSpace, Record, Writer

log = logging.getLogger("mqindex.index_service")

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _check_record(r: Sequence[Any]) -> Record:
    try:
        topic, queue_id, offset, size, store_time_ms, keys = r
    except (TypeError, ValueError):
        raise ValueError(f"a record is (topic, queue_id, offset, size, store_time_ms, keys), got {r!r}") from None
    if type(topic) is not str or not topic or "#" in topic:
        raise ValueError(f"topic must be a non-empty string without '#', got {topic!r}")
    for name, v in (("queue_id", queue_id), ("offset", offset), ("size", size), ("store_time_ms", store_time_ms)):
        if type(v) is not int:
            raise ValueError(f"{name} must be an int, got {v!r}")
    if not (0 <= queue_id < 1 << 31 and 0 <= size < 1 << 31 and 0 <= offset <= _I64_MAX
            and _I64_MIN < store_time_ms < _I64_MAX):
        raise ValueError(f"record field out of range: queue_id={queue_id} offset={offset} size={size} "
                         f"store_time_ms={store_time_ms}")
    if isinstance(keys, str):
        keys = (keys,)
    elif not all(type(k) is str for k in keys):
        raise ValueError(f"keys must be strings, got {keys!r}")
    return (topic, queue_id, offset, size, store_time_ms, keys)


_I31 = 1 << 31


def _clean_columns(out: list[Any], topics: set[str]) -> EntryColumns | None:
    """The whole batch checked column by column (C-level map/set and numpy, no Python loop per record):
    its columns, with the keys' fingerprints, when every record already has the shape _check_record would
    give it. None says nothing is wrong yet, only that the per-record loop must look (a new topic, a keys
    string, a float, ...)."""
    try:
        cols = entry_columns(out, with_fingerprints=True, strict=True)
    except (TypeError, ValueError, OverflowError):
        return None
    if not topics.issuperset(cols.topics) or not set(map(type, cols.keys)) <= {list, tuple}:
        return None
    if cols.counts is not None and not set(map(type, itertools.chain.from_iterable(cols.keys))) <= {str}:
        return None  # (one key per record: entry_columns checked it is a string)
    q, off, size, t = cols.queue, cols.offset, cols.size, cols.time
    ok = (q.min() >= 0 and q.max() < _I31 and size.min() >= 0 and size.max() < _I31 and off.min() >= 0
          and t.min() > _I64_MIN and t.max() < _I64_MAX)
    return cols if ok else None


def _check_batch(records: Iterable[IndexEntry | Sequence[Any]], topics: set[str]
                 ) -> tuple[list[Record], EntryColumns | None]:
    """Validate a batch on the fast path (one tight loop; topics already seen are not re-checked);
    any record that fails it goes through _check_record, which raises or normalises it. Returns the records
    and, when the column check passes, their columns (handed on so they are built once)."""
    out: list[Record] = records if type(records) is list else list(records)  # type: ignore[assignment]
    if out and (cols := _clean_columns(out, topics)) is not None:
        return out, cols
    fixed: list[tuple[int, Record]] = []
    for i, r in enumerate(out):
        try:
            topic, q, off, size, t, keys = r
        except (TypeError, ValueError):
            fixed.append((i, _check_record(r)))
            continue
        if (topic not in topics or type(q) is not int or type(off) is not int or type(size) is not int
                or type(t) is not int or type(keys) is str or not 0 <= q < _I31 or not 0 <= size < _I31
                or not 0 <= off <= _I64_MAX or not _I64_MIN < t < _I64_MAX):
            fixed.append((i, _check_record(r)))
            if type(topic) is str and "#" not in topic and topic:
                topics.add(topic)
            continue
        for k in keys:
            if type(k) is not str:
                _check_record(r)
    if fixed:
        out = list(out)
        for i, rec in fixed:
            out[i] = rec
    # the batch's topics are known now: a batch naming a new one gets its columns too (the writer need not build
    # them)
    return out, _clean_columns(out, topics) if out else None


class IndexService:
    def __init__(self, folders: StateFolders, config: ServiceConfig, store: object | None) -> None:
        self.folders = folders
        self.config = config
        self.store = store
        self.files_map = FileMap()
        self.checkpoints = CheckpointStore(folders)
        #: what lookups cost and what the key filters saved (/metrics: lookup_stats.LookupCollector)
        self.lookup_stats = LookupStats()
        self.filters = FilterCache(folders, store, config.filter_cache_bytes, self.lookup_stats)
        self.lifecycle = Lifecycle(folders, self.files_map, config, store, self.filters)
        self.recovery: RecoveryReport | None = None
        self._closed = False
        self._topics: set[str] = set()  # topics whose names were validated
        self._close_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(config.query_threads, thread_name_prefix="mqindex-query")
        self.writer: Writer
        self.background: Background

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], store: str | object | None = None, **config: Any) -> IndexService:
        """Open (or create) the service in `data_dir`, recovering every state folder first.

        `store` is a store URL (storage_tier.open_store) or an opened BlobStore; config keys are
        ServiceConfig's fields (slots, max_items, roll_age_ms, retention_ms, query_threads, ...)."""
        if isinstance(store, str):
            config.setdefault("store_url", store)
        cfg = config.pop("config", None) or ServiceConfig.from_kwargs(**config)
        blob_store: object | None
        if store is None and cfg.store_url:
            store = cfg.store_url
        if isinstance(store, str):
            from storage_tier import open_store

            blob_store = open_store(store)
        else:
            blob_store = store
        folders = StateFolders(data_dir)
        folders.lock()
        try:
            svc = cls(folders, cfg, blob_store)
            svc._start()
        except BaseException:
            folders.unlock()
            raise
        return svc

    def _start(self) -> None:
        rep, current, tail = recover(self.folders, self.files_map, self.config, self.store, self.checkpoints)
        self.recovery = rep
        self.adopted = adopt_builds(self.folders, self.files_map, self.lifecycle)  # external builds (Spark)
        tail_files = [mf for mf in self.files_map.files() if mf.stem in rep.tail_files]
        self.writer = Writer(self.config, self.folders, self.files_map, self.checkpoints, current, tail,
                             on_sealed=lambda mf: self.background.wake(), tail_files=tail_files)
        self.background = Background(self.config, self.folders, self.files_map, self.lifecycle, self._roll_if_due)
        self.writer.start()
        self.background.start()
        if self.files_map.by_state(FileState.SEALED, FileState.COMPACTED):
            self.background.wake()  # resume interrupted compactions and uploads

    # -- writes ----------------------------------------------------------------------------------
    def put(self, topic: str, queue_id: int, offset: int, size: int, keys: Sequence[str] | str,
            store_time_ms: int, msg_id: str | None = None) -> None:
        """Buffer one record's keys (and its message id, when given, as one more key). Returns once
        buffered; flush() makes it queryable. Raises if the writer has failed."""
        if msg_id is not None:
            keys = [keys, msg_id] if isinstance(keys, str) else [*keys, msg_id]
        self._require_open()
        self.writer.submit_one(_check_record((topic, queue_id, offset, size, store_time_ms, keys)))

    def put_batch(self, records: Iterable[IndexEntry | Sequence[Any]]) -> int:
        """The broker's fast path: IndexEntry or (topic, queue_id, offset, size, store_time_ms, keys)
        tuples (keys: a list of strings or one string), in dispatch order. Returns how many were
        buffered (all of them; a bad record raises ValueError before anything is buffered)."""
        self._require_open()
        recs, cols = _check_batch(records, self._topics)
        if recs:
            self.writer.submit(recs, cols)
        return len(recs)

    def flush(self, timeout: float | None = 60.0) -> None:
        """Wait until everything put before this call is written to the WRITING file (queryable),
        synced and covered by the checkpoint."""
        self._require_open()
        self.writer.flush(timeout)

    # -- reads -----------------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
              end_ms: int | None = None) -> list[IndexHit]:
        """Messages whose keys include exactly `key` in `topic` with store time in [begin_ms, end_ms]:
        exactly min(max_count, matches) hits, store time desc then offset desc, newest files first,
        no duplicates. Runs on the query pool."""
        return self.query_async(topic, key, max_count, begin_ms, end_ms).result()

    def query_async(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
                    end_ms: int | None = None, stats: QueryStats | None = None) -> Future[list[IndexHit]]:
        self._require_open()
        lo, hi = check_range(begin_ms, end_ms, max_count)
        if not isinstance(topic, str) or not isinstance(key, str):
            raise ValueError("topic and key must be strings")
        if max_count == 0 or lo > hi:
            f: Future[list[IndexHit]] = Future()
            f.set_result([])
            return f
        if self.config.retention_ms is not None:  # expired entries of a file not yet expired are skipped
            lo = max(lo, self.config.clock() - self.config.retention_ms)
            if lo > hi:
                f = Future()
                f.set_result([])
                return f
        filters = self.filters if self.config.key_filters else None
        return self._pool.submit(run_query, self.files_map, topic, key, max_count, lo, hi, self.config.verifier,
                                 stats, filters, self.lookup_stats, self.config.is_live)

    def files(self) -> list[FileInfo]:
        """Every live file, oldest begin first."""
        return [mf.info() for mf in self.files_map.files()]

    def offset_ranges(self) -> list[tuple[str, str, dict[QueueKey, tuple[int, int]] | None]]:
        """Every live file's (location, state, offset ranges per (topic, queue_id)); None: ranges unknown
        (imports, external builds)."""
        out = []
        for mf in self.files_map.files():
            rs = mf.ranges
            out.append((mf.location, str(mf.state.value), None if rs is None else dict(rs)))
        return out

    def checkpoint(self, topic: str, queue_id: int) -> int | None:
        """Highest offset of (topic, queue_id) durably indexed (None: nothing yet). After a crash the
        broker re-dispatches from the next offset; records at or below it are ignored if re-sent."""
        return self.checkpoints.current.offsets.get((topic, queue_id))

    def forget_queues(self, topic: str, queue_ids: list[int] | None = None, timeout: float = 60.0) -> None:
        """The topic was deleted: drop the checkpoints of its queues (all, or `queue_ids`) after everything put
        so far is written, so a topic created again under the name (offsets from 0) is indexed, not taken
        for re-sent records. Entries already written stay until their files expire."""
        self._require_open()
        self.writer.forget(topic, queue_ids, timeout)

    def checkpoints_snapshot(self) -> dict[QueueKey, int]:
        return dict(self.checkpoints.current.offsets)

    @property
    def skipped_redispatched(self) -> int:
        return self.writer.skipped

    # -- lifecycle -------------------------------------------------------------------------------
    def _roll_if_due(self) -> bool:
        mf: ManagedFile | None = self.writer.current
        if mf is None or mf.form is None or mf.form.item_count == 0:
            return False
        if self.config.clock() - mf.begin_ms < self.config.roll_age_ms:
            return False
        self.writer.request_roll("age")
        return True

    def roll(self) -> None:
        """Seal the WRITING file now (if it has items); the next put starts a new one."""
        self._require_open()
        self.writer.request_roll("requested")

    def compact_now(self, hold_upload_s: float = 0.0) -> str | None:
        """Seal the WRITING file (once everything put is written) and compact it on this thread. The background
        uploads the compacted file once `hold_upload_s` has passed (0: at its next cycle; `maintain()` at once).
        Returns the file's name, None when the WRITING file was empty."""
        self._require_open()
        self.flush()
        mf = self.writer.current
        if mf is None or mf.form is None or mf.form.item_count == 0:
            return None
        mf.next_attempt = math.inf  # the background steps a file only once its next attempt is due
        try:
            self.roll()
            self.lifecycle.compact(mf)
        except BaseException:
            mf.next_attempt = 0.0  # the background retries it as usual
            self.background.wake()
            raise
        mf.next_attempt = time.monotonic() + hold_upload_s
        if hold_upload_s == 0:
            self.background.wake()
        return mf.stem

    def maintain(self) -> CycleReport:
        """One background cycle now, ignoring retry backoff: roll an aged file, compact, upload,
        expire, sweep orphans, load new RocketMQ registrations. Deterministic for tests."""
        self._require_open()
        return self.background.cycle(ignore_backoff=True)

    run_background_once = maintain

    def import_rocketmq(self, directory: str | os.PathLike[str], slot_count: int | None = None,
                        copy: bool = False) -> list[Registered]:
        """Register a directory of RocketMQ index files and serve them read-only right away."""
        out = register_directory(self.folders.root, directory, slot_count, copy)
        load_imported(self.folders, self.files_map)
        return out

    def close(self, drain: bool = False) -> None:
        """Stop the threads after writing everything buffered. drain=True also seals the WRITING
        file and compacts/uploads every file now; otherwise they are left for the next open."""
        with self._close_lock:
            if self._closed:
                return
            try:
                try:
                    self.writer.flush(None)
                except IndexOutOfSpace as exc:  # the checkpoint does not cover them: re-dispatched at the next open
                    log.warning("index closed with records unwritten: out of disk",
                                extra={"data_dir": str(self.folders.root), "error": str(exc)})
                    drain = False
                if drain:
                    self.writer.request_roll("close")
                    self.background.cycle()
            finally:
                self._closed = True
                self.background.stop()
                self.writer.stop()
                self._pool.shutdown(wait=True)
                for mf in self.files_map.files():
                    mf.retire()
                if self.store is not None and hasattr(self.store, "close"):
                    self.store.close()  # type: ignore[attr-defined]
                self.folders.unlock()
                log.info("index service closed", extra={"data_dir": str(self.folders.root)})

    def __enter__(self) -> IndexService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("the index service is closed")
