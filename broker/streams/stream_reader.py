"""Stream read path: log cache first, then the block cache, then objects found through the metadata lookup,
reading only the blocks that cover the requested offsets (ranged GETs), with each object's index cached
after first use. A damaged object raises `ObjectFormatError` naming it, unless records before it were read:
those are returned and the next read, which starts inside the damaged object, raises."""

from __future__ import annotations

import threading
from collections import OrderedDict

from broker.errors import ObjectFormatError
from broker.metadata.client import MetadataClient
from broker.objects.format import StreamRecord
from broker.objects.reader import ObjectReader
from broker.streams.block_cache import BlockCache
from broker.streams.log_cache import LogCache
from storage_tier import BlobStore


class StreamReader:
    def __init__(self, store: BlobStore, meta: MetadataClient, cache: LogCache | None = None,
                 index_cache_entries: int = 1024, block_cache: BlockCache | None = None) -> None:
        self.store = store
        self.meta = meta
        self.cache = cache
        self.block_cache = block_cache
        self._lock = threading.Lock()
        self._readers: OrderedDict[int, ObjectReader] = OrderedDict()
        self._max_readers = index_cache_entries

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
                     max_bytes: int) -> list[StreamRecord]:
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
            got = self.block_cache.get(object_id, e.position)
            if got is None:
                missing.append(e)
            else:
                blocks[e.position] = got
        for e, records in reader.read_blocks(missing):
            self.block_cache.put(object_id, e.position, records)
            blocks[e.position] = records
        out: list[StreamRecord] = []
        for e in kept:
            out.extend(r for r in blocks[e.position] if r.last_offset > start and r.base_offset < end)
        return out

    def object_at(self, stream_id: int, offset: int) -> str | None:
        """The key of the committed object holding `offset` of the stream (None: not in an object)."""
        lookup = self.meta.get_objects(stream_id, offset, offset + 1, limit=1)
        for ref in lookup.objects:
            if ref.start <= offset < ref.end:
                return self.meta.object_key(ref.object_id)
        return None

    def read(self, stream_id: int, start: int, end: int, max_bytes: int = 1 << 20) -> list[StreamRecord]:
        """Records overlapping [start, end), in order, stopping after about `max_bytes` of payload."""
        if self.cache is not None:
            hit = self.cache.read(stream_id, start, end)
            if hit is not None:
                return hit
        out: list[StreamRecord] = []
        pos, got = start, 0
        while pos < end and got < max_bytes:
            lookup = self.meta.get_objects(stream_id, pos, end, limit=8)
            if not lookup.objects:
                break
            for ref in lookup.objects:
                try:
                    recs = self._read_object(ref.object_id, ref.size, stream_id, pos, min(end, ref.end),
                                             max_bytes - got)
                except ObjectFormatError:
                    if out:
                        return out  # serve what precedes the damaged object; a read starting in it raises
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
