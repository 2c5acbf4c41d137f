"""Readers of index files uploaded to a BlobStore: ranged GETs only, nothing downloaded whole.

- RemoteCompactedIndexReader(store, key): a native compacted file. Opening costs two GETs (header,
  then summary + footer); every query after that is one ranged GET of the block(s) that can hold
  the key, checked against its CRC32C before use (zero GETs when the fence rules the key out).
- open_remote_rocketmq(store, key): a RocketMQ compacted file; a HEAD and a header GET to open,
  then two ranged GETs per query (slot, then the slot's run), as RocketMQ does.
"""

from __future__ import annotations

from index_file.native_compacted import CompactedIndexReader
from index_file.rocketmq_format import RocketMQIndexReader, open_remote_rocketmq
from index_file.source import BlobSource

__all__ = ["RemoteCompactedIndexReader", "RocketMQIndexReader", "open_remote_rocketmq"]


class RemoteCompactedIndexReader(CompactedIndexReader):
    """A native compacted file in a BlobStore; `store.meter` counts one GET per query."""

    def __init__(self, store: object, key: str) -> None:
        self.store = store
        self.key = key
        super().__init__(BlobSource(store, key), verify_blocks=False)
