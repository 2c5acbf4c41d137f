"""Index file formats: the native unsealed and compacted files, their compaction and readers, and the
RocketMQ-compatible tiered IndexStoreFile codec. Byte layouts are in docs/FORMAT.md.

The index service uses:
- NativeIndexWriter.create(path, begin_ms, slots, max_items) / .open(path) (recovering),
  .put_batch(entries) -> accepted, .query(...), .seal(), .close();
- compact(src_path, dst_path) -> CompactionStats;
- CompactedIndexReader(path) (local mmap) and RemoteCompactedIndexReader(store, key);
- RocketMQIndexWriter / RocketMQIndexReader / compact_rocketmq for RocketMQ's own files;
- detect_format(first_bytes) to tell the formats apart.
"""

from index_file.detect import FileFormat, detect_format, open_reader
from index_file.errors import FormatError, IndexFileError, IndexStateError
from index_file.hashing import fingerprint, java_string_hash, rocketmq_hash
from index_file.model import AppendResult, IndexEntry, IndexHit
from index_file.native_compacted import CompactedIndexReader
from index_file.native_compaction import CompactionStats, compact
from index_file.native_unsealed import NativeIndexWriter, NativeUnsealedReader
from index_file.remote_reader import RemoteCompactedIndexReader
from index_file.rocketmq_format import RocketMQIndexReader, RocketMQIndexWriter, compact_rocketmq, open_remote_rocketmq
from index_file.source import BlobSource, ByteSource, BytesSource, MmapSource

__all__ = [
    "AppendResult", "BlobSource", "ByteSource", "BytesSource", "CompactedIndexReader", "CompactionStats",
    "FileFormat", "FormatError", "IndexEntry", "IndexFileError", "IndexHit", "IndexStateError", "MmapSource",
    "NativeIndexWriter", "NativeUnsealedReader", "RemoteCompactedIndexReader", "RocketMQIndexReader",
    "RocketMQIndexWriter", "compact", "compact_rocketmq", "detect_format", "fingerprint", "java_string_hash",
    "open_reader", "open_remote_rocketmq", "rocketmq_hash",
]
