"""Stream read path: log cache first, then the block cache, then objects found through the metadata lookup,
reading only the blocks that cover the requested offsets (ranged GETs), with each object's index cached
after first use. A damaged object raises `ObjectFormatError` naming it, unless records before it were read:
those are returned and the next read, which starts inside the damaged object, raises. An object found missing
is first checked against the metadata caught up: retention may have trimmed the range meanwhile (then
`OffsetOutOfRange`, as for any read below the stream's start) or compaction replaced the object (then the read
looks the range up again); only an object the metadata still lists is damage.

Read-ahead: a read of more than one offset that misses the block cache (a consumer or a whole-record page
walking a cold partition) also starts reading the stream's next blocks in the same object, up to
`readahead_bytes`, in ranged GETs of about `readahead_get_bytes` each on a small pool of threads, so the
store is read while the caller decodes what it has. A reader paging through the window moves it a page at a
time; the window is topped up only once a whole GET's worth of it is uncovered (a GET costs mostly per request:
4 MiB GETs took a third of the CPU per MiB of 1 MiB ones through boto3). The blocks land in the block cache; a
read that needs a block still in flight waits for it instead of asking the store again. Memory is bounded by
`max_inflight_bytes` (no new read-ahead above it) and by the block cache. When the window reaches past the
object's end, the read-ahead goes on into the stream's next object (looked up, and its footer and index read,
on a pool thread too, also when the read itself ends inside this object, as a page does), so a consumer
crossing from one object to the next does not wait for a cold GET. A read-ahead GET that fails is dropped: the
block is then read by the caller, which sees the damage or the store error as before. Key lookups (one offset)
never read ahead.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from broker.errors import ObjectFormatError, OffsetOutOfRange
from broker.metadata.client import MetadataClient
from broker.metadata.image import ObjectRef
from broker.objects.format import IndexEntry, StreamRecord
from broker.objects.reader import ObjectReader
from broker.streams.block_cache import BlockCache
from broker.streams.log_cache import LogCache
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.streams")

DEFAULT_READAHEAD_BYTES = 8 << 20
DEFAULT_READAHEAD_GET_BYTES = 4 << 20
READAHEAD_THREADS = 2


class StreamReader:
    def __init__(self, store: BlobStore, meta: MetadataClient, cache: LogCache | None = None,
                 index_cache_entries: int = 1024, block_cache: BlockCache | None = None, *,
                 readahead_bytes: int = DEFAULT_READAHEAD_BYTES,
                 readahead_get_bytes: int = DEFAULT_READAHEAD_GET_BYTES) -> None:
        self.store = store
        self.meta = meta
        self.cache = cache
        self.block_cache = block_cache
        self._lock = threading.Lock()
        self._readers: OrderedDict[int, ObjectReader] = OrderedDict()
        self._max_readers = index_cache_entries
        self.readahead_bytes = readahead_bytes if block_cache is not None else 0
        self.readahead_get_bytes = max(readahead_get_bytes, 1)
        # read-ahead never holds more than the block cache could keep of it
        self.max_inflight_bytes = min(2 * readahead_bytes, block_cache.max_bytes // 2) if block_cache else 0
        self._inflight: dict[tuple[int, int], Future[list[StreamRecord] | None]] = {}
        self._inflight_bytes = 0
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self.readahead_gets = 0  # read-ahead GETs issued (tests and benchmarks read it)

    def close(self) -> None:
        """Stop reading ahead; reads still work (synchronously)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            left, self._inflight, self._inflight_bytes = self._inflight, {}, 0
        for fut in left.values():  # cancelled before they ran: their waiters read the blocks themselves
            if not fut.done():
                fut.set_result(None)

    def _reader(self, object_id: int, size: int) -> ObjectReader:
        with self._lock:
            r = self._readers.get(object_id)
            if r is not None:
                self._readers.move_to_end(object_id)
                return r
        r = ObjectReader(self.store, self.meta.object_key(object_id), size=size or None)
        with self._lock:
            self._readers[object_id] = r
            if len(self._readers) > self._max_readers:
                self._readers.popitem(last=False)
        return r

    def reader(self, object_id: int, size: int) -> ObjectReader:
        """The (cached) reader of one object: its footer and index are read once."""
        return self._reader(object_id, size)

    def _read_object(self, object_id: int, size: int, stream_id: int, start: int, end: int,
                     max_bytes: int, ahead_end: int | None = None, after: ObjectRef | None = None
                     ) -> list[StreamRecord]:
        reader = self._reader(object_id, size)
        if self.block_cache is None:
            return reader.read(stream_id, start, end, max_bytes)
        entries = reader.entries_for(stream_id, start, end)
        kept, total = [], 0
        for e in entries:
            kept.append(e)
            total += e.size
            if total >= max_bytes:
                break
        blocks: dict[int, list[StreamRecord]] = {}
        missing = []
        for e in kept:
            got = self._cached_or_awaited(object_id, e.position)
            if got is None:
                missing.append(e)
            else:
                blocks[e.position] = got
        if kept and end - start > 1:
            left = self._read_ahead(reader, object_id, stream_id, kept[-1].end_offset, ahead_end or end,
                                    self.readahead_bytes)
            if left > 0 and after is not None:
                self._submit(self._read_ahead_into, after, stream_id, left)
            elif left > 0 and ahead_end is not None:
                # a read that ends inside this object (a page) did not look up the next one: found on the pool
                self._submit(self._read_ahead_next, stream_id, ahead_end, left)
        for e, records in reader.read_blocks(missing):
            self.block_cache.put(object_id, e.position, records)
            blocks[e.position] = records
        out: list[StreamRecord] = []
        for e in kept:
            out.extend(r for r in blocks[e.position] if r.last_offset > start and r.base_offset < end)
        return out

    def _cached_or_awaited(self, object_id: int, position: int) -> list[StreamRecord] | None:
        """The block from the cache, or from a read-ahead in flight (waited for); None: read it now."""
        assert self.block_cache is not None
        got = self.block_cache.get(object_id, position)
        if got is not None:
            return got
        with self._lock:
            fut = self._inflight.get((object_id, position))
        return fut.result() if fut is not None else None

    def _submit(self, fn: Callable[..., None], *args: object) -> None:
        with self._lock:
            if self._closed:
                return
            self._pool_locked().submit(fn, *args)

    def _pool_locked(self) -> ThreadPoolExecutor:
        """The read-ahead pool, started on first use (the caller holds the lock)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(READAHEAD_THREADS, thread_name_prefix="readahead")
        return self._pool

    def _read_ahead_into(self, ref: ObjectRef, stream_id: int, budget: int) -> None:
        """The read-ahead's continuation into the stream's next object (on a pool thread)."""
        try:
            reader = self._reader(ref.object_id, ref.size)
        except Exception as exc:  # noqa: BLE001 - the caller opens the object itself and meets the error there
            log.debug("read-ahead failed; the blocks are read on demand", extra={"error": str(exc)})
            return
        self._read_ahead(reader, ref.object_id, stream_id, ref.start, ref.end, budget)

    def _read_ahead_next(self, stream_id: int, offset: int, budget: int) -> None:
        """The read-ahead's continuation into the object holding `offset` (the end of the one read), found in
        the metadata image as it is (no refresh: an object it does not hold yet is read on demand)."""
        try:
            lookup = self.meta.get_objects(stream_id, offset, offset + 1, limit=1, refresh=False)
        except Exception as exc:  # noqa: BLE001 - the caller looks the object up itself and meets the error there
            log.debug("read-ahead failed; the blocks are read on demand", extra={"stream": stream_id,
                                                                                 "error": str(exc)})
            return
        for ref in lookup.objects:
            if ref.start <= offset < ref.end:
                self._read_ahead_into(ref, stream_id, budget)

    def _read_ahead(self, reader: ObjectReader, object_id: int, stream_id: int, start: int, end: int,
                    budget: int) -> int:
        """Start ranged GETs of the stream's blocks after `start` (up to `end`) in this object, at most `budget`
        bytes. Returns the budget left once the object's blocks are all cached or in flight (0: the window
        or the memory bound stopped it first)."""
        if self.readahead_bytes <= 0:
            return 0
        if start >= end:
            return budget
        assert self.block_cache is not None
        runs: list[list[IndexEntry]] = []
        with self._lock:
            if self._closed:
                return 0
            new = 0
            for e in reader.entries_for(stream_id, start, end):
                if budget <= 0 or self._inflight_bytes + new + e.size > self.max_inflight_bytes:
                    budget = 0
                    break
                budget -= e.size
                if (object_id, e.position) in self._inflight or self.block_cache.contains(object_id, e.position):
                    continue
                run = runs[-1] if runs else None
                if (run is None or e.position != run[-1].position + run[-1].size
                        or run[-1].position + run[-1].size - run[0].position + e.size > self.readahead_get_bytes):
                    runs.append([e])
                else:
                    run.append(e)
                new += e.size
            if budget <= 0 and new < self.readahead_get_bytes:
                # the window moved by less than one GET's worth (a reader paging through it tops it up a page at
                # a time): wait until a whole GET is uncovered, as a GET's cost is mostly per request
                return 0
            for e in (e for run in runs for e in run):
                self._inflight[(object_id, e.position)] = Future()
            self._inflight_bytes += new
            if not runs:
                return budget
            pool = self._pool_locked()
            self.readahead_gets += len(runs)
        for run in runs:
            pool.submit(self._fetch_run, reader, object_id, run)
        return budget

    def _fetch_run(self, reader: ObjectReader, object_id: int, run: list[IndexEntry]) -> None:
        assert self.block_cache is not None
        done: set[int] = set()
        try:
            for e, records in reader.read_blocks(run):
                self.block_cache.put(object_id, e.position, records)
                self._settle(object_id, e, records)
                done.add(e.position)
        except Exception as exc:  # noqa: BLE001 - the caller reads the block itself and meets the error there
            log.debug("read-ahead failed; the blocks are read on demand",
                      extra={"object": reader.key, "error": str(exc)})
        finally:
            for e in run:
                if e.position not in done:
                    self._settle(object_id, e, None)

    def _settle(self, object_id: int, e: IndexEntry, records: list[StreamRecord] | None) -> None:
        with self._lock:
            fut = self._inflight.pop((object_id, e.position), None)
            if fut is not None:
                self._inflight_bytes -= e.size
        if fut is not None:
            fut.set_result(records)

    def object_at(self, stream_id: int, offset: int) -> str | None:
        """The key of the committed object holding `offset` of the stream (None: not in an object)."""
        lookup = self.meta.get_objects(stream_id, offset, offset + 1, limit=1)
        for ref in lookup.objects:
            if ref.start <= offset < ref.end:
                return self.meta.object_key(ref.object_id)
        return None

    def _gone_meanwhile(self, stream_id: int, pos: int, ref: ObjectRef) -> bool:
        """An object found missing: True when the metadata, caught up, no longer reads `pos` from it (compaction
        replaced it: look again); OffsetOutOfRange when retention trimmed the stream past `pos`; False when the
        metadata still lists it there (damage in the store)."""
        s = self.meta.get_stream(stream_id)  # caught up
        if pos < s.start_offset:
            raise OffsetOutOfRange(f"stream {stream_id}: offset {pos} was trimmed meanwhile (the stream starts at "
                                   f"{s.start_offset} now)")
        now = self.meta.get_objects(stream_id, pos, pos + 1, limit=1, refresh=False).objects
        return not now or now[0].object_id != ref.object_id

    def read(self, stream_id: int, start: int, end: int, max_bytes: int = 1 << 20) -> list[StreamRecord]:
        """Records overlapping [start, end), in order, stopping after about `max_bytes` of payload."""
        if self.cache is not None:
            hit = self.cache.read(stream_id, start, end)
            if hit is not None:
                return hit
        out: list[StreamRecord] = []
        pos, got = start, 0
        relooked = 0
        while pos < end and got < max_bytes:
            lookup = self.meta.get_objects(stream_id, pos, end, limit=8)
            if not lookup.objects:
                break
            for i, ref in enumerate(lookup.objects):
                try:
                    recs = self._read_object(ref.object_id, ref.size, stream_id, pos, min(end, ref.end),
                                             max_bytes - got, ahead_end=ref.end,
                                             after=lookup.objects[i + 1] if i + 1 < len(lookup.objects) else None)
                except ObjectFormatError as exc:
                    if out:
                        return out  # serve what precedes the damaged object; a read starting in it raises
                    if exc.check == "missing object" and relooked < 3 and self._gone_meanwhile(stream_id, pos, ref):
                        relooked += 1
                        break  # replaced by compaction: the next turn looks the range up again
                    raise
                if not recs:
                    return out
                out.extend(recs)
                got += sum(len(r.payload) for r in recs)
                pos = recs[-1].last_offset
                if got >= max_bytes or pos < ref.end:
                    return out
        if pos < end and self.cache is not None:
            tail = self.cache.read(stream_id, pos, end)
            if tail:
                out.extend(tail)
        return out
