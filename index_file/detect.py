"""Tell index file formats apart by their first four bytes and open the right reader."""

from __future__ import annotations

import enum
import os
import struct

from index_file import native_compacted, native_unsealed, rocketmq_format
from index_file.errors import FormatError
from index_file.source import ByteSource, open_source


class FileFormat(enum.Enum):
    NATIVE_UNSEALED = "native-unsealed"
    NATIVE_COMPACTED = "native-compacted"
    ROCKETMQ = "rocketmq"


def detect_format(name: str, head: bytes | memoryview) -> FileFormat:
    """The format whose magic starts `head`; FormatError('magic') for anything else."""
    if len(head) < 4:
        raise FormatError(name, "truncated", f"{len(head)} bytes cannot hold a magic")
    magic = bytes(head[:4])
    if magic == native_unsealed.MAGIC:
        return FileFormat.NATIVE_UNSEALED
    if magic == native_compacted.MAGIC:
        return FileFormat.NATIVE_COMPACTED
    if struct.unpack(">I", magic)[0] in (rocketmq_format.MAGIC_OPEN, rocketmq_format.MAGIC_END):
        return FileFormat.ROCKETMQ
    raise FormatError(name, "magic", f"{magic!r} is not the magic of any index file format")


def open_reader(source: ByteSource | str | os.PathLike[str], rocketmq_slots: int | None = None
                ) -> tuple[FileFormat, object]:
    """(format, reader) for any index file: NativeUnsealedReader, CompactedIndexReader or
    RocketMQIndexReader. Every reader has query(topic, key, max_count, begin_ms, end_ms)."""
    local = isinstance(source, (str, os.PathLike))
    src = open_source(source)
    try:
        fmt = detect_format(src.name, src.read(0, min(4, src.size())))
        if fmt is FileFormat.NATIVE_UNSEALED:
            return fmt, native_unsealed.NativeUnsealedReader(src)
        if fmt is FileFormat.NATIVE_COMPACTED:
            return fmt, native_compacted.CompactedIndexReader(src, verify_blocks=local or None)
        return fmt, rocketmq_format.RocketMQIndexReader(src, slot_count=rocketmq_slots)
    except BaseException:
        src.close()
        raise
