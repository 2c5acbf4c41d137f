"""The byte layout of the native unsealed (WRITING) index file: constants, the header, the A/B checkpoints,
the 40-byte item and its check word, and the walk down a slot's item chain. Shared by the writer
(native_unsealed.py) and the read-only view (native_unsealed_reader.py); docs/FORMAT.md has it byte by byte."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
import numpy as np
import xxhash

from index_file.errors import FormatError, NewerFormat
from index_file.model import IndexHit

MAGIC = b"MQXU"
VERSION = 1
HEADER_SIZE = 64
CKPT_SIZE = 64
SLOTS_OFFSET = HEADER_SIZE + 2 * CKPT_SIZE  # 192
ITEM_SIZE = 40
STATE_WRITING = 1
STATE_SEALED = 2
CHUNK_ITEMS = 65536  # items written between two checkpoints; recovery clears at most this many

_HEADER = struct.Struct("<4sHHIIqHH32sI")
_CKPT = struct.Struct("<QIIIIqq20sI")
ITEM_STRUCT = struct.Struct("<QqqiiII")
U32 = struct.Struct("<I")
assert _HEADER.size == HEADER_SIZE and _CKPT.size == CKPT_SIZE and ITEM_STRUCT.size == ITEM_SIZE

ITEM_DTYPE = np.dtype([("fp", "<u8"), ("offset", "<i8"), ("time", "<i8"), ("queue", "<i4"), ("size", "<i4"),
                       ("next", "<u4"), ("check", "<u4")])
assert ITEM_DTYPE.itemsize == ITEM_SIZE

xxh3 = xxhash.xxh3_64_intdigest
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_K = [np.uint64(k) for k in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
                             0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)]
_CHECK_SALT = np.uint64(0x4D5158554E53454C)  # keeps an all-zero item at index 0 from checking


def slots_bytes(slot_count: int) -> int:
    return (slot_count * 4 + 7) // 8 * 8


def items_offset(slot_count: int) -> int:
    return SLOTS_OFFSET + slots_bytes(slot_count)


def file_size(slot_count: int, items: int) -> int:
    return items_offset(slot_count) + items * ITEM_SIZE


def item_checks(items: np.ndarray, first_index: int) -> np.ndarray:
    """The per-item check word (u32) of consecutive items starting at item `first_index`.

    A 64-bit mix of every field and the item's index, folded to 32 bits; vectorised so batches are
    cheap to seal. Including the index means an item copied or left over at another position fails.
    """
    with np.errstate(over="ignore"):
        idx = np.arange(first_index, first_index + len(items), dtype=np.uint64)
        qs = (items["queue"].astype(np.uint32).astype(np.uint64) << np.uint64(32)) | \
            items["size"].astype(np.uint32).astype(np.uint64)
        nx = (items["next"].astype(np.uint64) << np.uint64(32)) | idx
        h = items["fp"] ^ _CHECK_SALT
        h = h ^ (items["offset"].view(np.uint64) * _K[0])
        h = (h * _K[1]) ^ (items["time"].view(np.uint64) * _K[2])
        h = (h * _K[3]) ^ (qs * _K[4])
        h = (h * _K[5]) ^ (nx * _K[0])
        h ^= h >> np.uint64(33)
        h *= _K[4]
        h ^= h >> np.uint64(33)
        h *= _K[5]
        h ^= h >> np.uint64(33)
    return (h & np.uint64(0xFFFFFFFF)).astype(np.uint32)


@dataclass(frozen=True)
class NativeHeader:
    slot_count: int
    max_items: int
    begin_ms: int

    def pack(self) -> bytes:
        body = _HEADER.pack(MAGIC, VERSION, HEADER_SIZE, self.slot_count, self.max_items, self.begin_ms,
                            ITEM_SIZE, 0, bytes(32), 0)
        return body[:60] + U32.pack(crc32c.crc32c(body[:60]))

    @classmethod
    def parse(cls, name: str, data: bytes | memoryview) -> NativeHeader:
        if len(data) < HEADER_SIZE:
            raise FormatError(name, "truncated", f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
        magic, version, hsize, slots, max_items, begin, isize, _r, _pad, crc = _HEADER.unpack_from(data, 0)
        if magic != MAGIC:
            raise FormatError(name, "magic", f"{bytes(magic)!r} is not the native unsealed magic {MAGIC!r}")
        if crc32c.crc32c(bytes(data[:60])) != crc:
            raise FormatError(name, "header crc32c", "the header's checksum does not match its bytes")
        if version > VERSION:
            raise NewerFormat(name, version, VERSION)
        if version != VERSION or hsize != HEADER_SIZE or isize != ITEM_SIZE:
            raise FormatError(name, "version", f"version {version}, header {hsize} B, item {isize} B not supported")
        if slots <= 0 or max_items <= 0:
            raise FormatError(name, "geometry", f"{slots} slots, {max_items} items")
        return cls(slots, max_items, begin)


@dataclass(frozen=True)
class Checkpoint:
    seq: int
    state: int
    count: int
    items_crc: int
    slots_crc: int
    min_ms: int
    max_ms: int

    def pack(self) -> bytes:
        body = _CKPT.pack(self.seq, self.state, self.count, self.items_crc, self.slots_crc, self.min_ms,
                          self.max_ms, bytes(20), 0)
        return body[:60] + U32.pack(crc32c.crc32c(body[:60]))

    @classmethod
    def parse(cls, data: bytes | memoryview) -> Checkpoint | None:
        """The checkpoint in these 64 bytes, or None when it was never written or fails its CRC."""
        seq, state, count, icrc, scrc, mn, mx, _pad, crc = _CKPT.unpack_from(data, 0)
        if seq == 0 or crc32c.crc32c(bytes(data[:60])) != crc or state not in (STATE_WRITING, STATE_SEALED):
            return None
        return cls(seq, state, count, icrc, scrc, mn, mx)


def checkpoint_copies(data: bytes | memoryview) -> list[Checkpoint]:
    """The valid checkpoint copies in the first SLOTS_OFFSET bytes of a file, newest (highest seq) first."""
    found = [c for c in (Checkpoint.parse(data[HEADER_SIZE:HEADER_SIZE + CKPT_SIZE]),
                         Checkpoint.parse(data[HEADER_SIZE + CKPT_SIZE:SLOTS_OFFSET])) if c is not None]
    return sorted(found, key=lambda c: c.seq, reverse=True)


def read_checkpoint(name: str, data: bytes | memoryview) -> Checkpoint:
    found = checkpoint_copies(data)
    if not found:
        raise FormatError(name, "checkpoint crc32c", "neither checkpoint copy is valid")
    return found[0]


def check_both_checkpoints(name: str, data: bytes | memoryview) -> None:
    """Sealing writes its checkpoint after a writing one, so a sealed file has two valid copies."""
    for i in range(2):
        at = HEADER_SIZE + i * CKPT_SIZE
        if Checkpoint.parse(data[at:at + CKPT_SIZE]) is None:
            raise FormatError(name, "checkpoint crc32c", f"checkpoint copy {i} of a sealed file is invalid")


def walk_chain(name: str, buf: object, items_off: int, limit: int, max_items: int, head: int, fp: int,
               topic: str, key: str, lo: int, hi: int) -> list[IndexHit]:
    """Follow a slot chain in `buf` (anything struct can unpack from); items >= limit are skipped
    (a batch being written), every pointer is range-checked so a bad file cannot loop or overrun."""
    hits: list[IndexHit] = []
    unpack = ITEM_STRUCT.unpack_from
    prev = max_items + 1
    cur = head
    while cur:
        if cur >= prev:
            raise FormatError(name, "item chain", f"item {cur - 1} follows item {prev - 1} (must be older)")
        i = cur - 1
        if i < limit:
            ifp, off, t, q, size, nxt, _chk = unpack(buf, items_off + i * ITEM_SIZE)  # type: ignore[arg-type]
            if ifp == fp and lo <= t <= hi:
                hits.append(IndexHit(topic, q, off, size, t, key, True))
        else:  # part of a batch being written: only its link down the chain is used
            pos = items_off + i * ITEM_SIZE + 32
            if pos + 4 > len(buf):  # type: ignore[arg-type]
                raise FormatError(name, "item chain", f"item {i} is beyond the end of the file")
            nxt = U32.unpack_from(buf, pos)[0]  # type: ignore[arg-type]
        prev = cur
        cur = nxt
    return hits
