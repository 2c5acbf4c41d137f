"""A read-only view of a native unsealed index file on any ByteSource (a local file or a store object), for
inspection (`mqindex inspect`): it trusts the last checkpoint; recovery is the writer's (native_unsealed.py)."""

from __future__ import annotations

import os

import crc32c
import numpy as np

from index_file.errors import FormatError
from index_file.model import IndexHit, check_range, finish_hits
from index_file.native_unsealed_layout import (
    ITEM_DTYPE,
    ITEM_SIZE,
    ITEM_STRUCT,
    SLOTS_OFFSET,
    STATE_SEALED,
    U32,
    NativeHeader,
    check_both_checkpoints,
    file_size,
    items_offset,
    read_checkpoint,
    xxh3,
)
from index_file.source import ByteSource, open_source


class NativeUnsealedReader:
    """Read-only view of a native unsealed file on any ByteSource (local mmap or BlobStore), for
    inspection. It trusts the last checkpoint and verifies only a SEALED file's checksums when
    `verify` is set; a WRITING file after a crash must be recovered with NativeIndexWriter.open."""

    def __init__(self, source: ByteSource | str | os.PathLike[str], verify: bool = True) -> None:
        self.source = open_source(source)
        self.name = self.source.name
        head = self.source.read(0, SLOTS_OFFSET)
        self.header = NativeHeader.parse(self.name, head)
        self.ckpt = read_checkpoint(self.name, head)
        self._items_off = items_offset(self.header.slot_count)
        if self.ckpt.count > self.header.max_items:
            raise FormatError(self.name, "checkpoint count", f"{self.ckpt.count} of {self.header.max_items}")
        size = self.source.size()
        need = file_size(self.header.slot_count, self.ckpt.count)
        if size < need:
            raise FormatError(self.name, "truncated", f"{size} bytes, the checkpoint needs {need}")
        if verify and self.ckpt.state == STATE_SEALED:
            check_both_checkpoints(self.name, head)
            if crc32c.crc32c(bytes(self.source.read(SLOTS_OFFSET, self._items_off))) != self.ckpt.slots_crc:
                raise FormatError(self.name, "slots crc32c", "the slot section does not match its checksum")
            if crc32c.crc32c(bytes(self.source.read(self._items_off, need))) != self.ckpt.items_crc:
                raise FormatError(self.name, "items crc32c", "the item section does not match its checksum")

    @property
    def item_count(self) -> int:
        return self.ckpt.count

    @property
    def sealed(self) -> bool:
        return self.ckpt.state == STATE_SEALED

    def query(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
              end_ms: int | None = None) -> list[IndexHit]:
        lo, hi = check_range(begin_ms, end_ms, max_count)
        if max_count == 0:
            return []
        fp = xxh3(f"{topic}#{key}".encode())
        spos = SLOTS_OFFSET + 4 * (fp % self.header.slot_count)
        head = U32.unpack_from(self.source.read(spos, spos + 4), 0)[0]
        hits: list[IndexHit] = []
        prev = self.header.max_items + 1
        while head:
            if head >= prev:
                raise FormatError(self.name, "item chain", f"item {head - 1} follows item {prev - 1}")
            i = head - 1
            pos = self._items_off + i * ITEM_SIZE
            if i < self.ckpt.count:
                ifp, off, t, q, size, nxt, _c = ITEM_STRUCT.unpack_from(self.source.read(pos, pos + ITEM_SIZE), 0)
                if ifp == fp and lo <= t <= hi:
                    hits.append(IndexHit(topic, q, off, size, t, key, True))
            else:  # written after the checkpoint: the chain continues below it
                nxt = U32.unpack_from(self.source.read(pos + 32, pos + 36), 0)[0]
            prev = head
            head = nxt
        return finish_hits(hits, max_count)

    def items(self) -> np.ndarray:
        raw = self.source.read(self._items_off, self._items_off + self.ckpt.count * ITEM_SIZE)
        return np.frombuffer(raw, dtype=ITEM_DTYPE, count=self.ckpt.count)

    def slots(self) -> np.ndarray:
        return np.frombuffer(self.source.read(SLOTS_OFFSET, SLOTS_OFFSET + 4 * self.header.slot_count), dtype="<u4")

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> NativeUnsealedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
