"""Stream read path: log cache first, then objects found through the metadata lookup, reading only the
blocks that cover the requested offsets (ranged GETs), with each object's index cached after first use."""

from __future__ import annotations

from collections import OrderedDict

from broker.log_cache import LogCache
from broker.metadata.client import MetadataClient
from broker.object_format import StreamRecord
from broker.object_reader import ObjectReader
from storage_tier import BlobStore


class StreamReader:
    def __init__(self, store: BlobStore, meta: MetadataClient, cache: LogCache | None = None,
                 index_cache_entries: int = 1024) -> None:
        self.store = store
        self.meta = meta
        self.cache = cache
        self._readers: OrderedDict[int, ObjectReader] = OrderedDict()
        self._max_readers = index_cache_entries

    def _reader(self, object_id: int, size: int) -> ObjectReader:
        r = self._readers.get(object_id)
        if r is None:
            r = ObjectReader(self.store, self.meta.object_key(object_id), size=size or None)
            self._readers[object_id] = r
            if len(self._readers) > self._max_readers:
                self._readers.popitem(last=False)
        else:
            self._readers.move_to_end(object_id)
        return r

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
                recs = self._reader(ref.object_id, ref.size).read(stream_id, pos, min(end, ref.end), max_bytes - got)
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
