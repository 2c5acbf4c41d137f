"""Key filters: an exact-membership filter of the `topic#key` fingerprints one compacted index file holds.

A lookup asks a file's filter before it reads the file: "no" means the file holds no entry of that key (no
false negatives, ever), "maybe" means read it (a false positive costs one read that finds nothing, about 1 in
65,000 absent keys). So a key found in one file out of thousands costs one read, and an absent key almost
always none.

The filter is a binary fuse filter with 16-bit fingerprints (Graf & Lemire, "Binary Fuse Filters", 2022):
about 2.26 bytes per distinct key and a false-positive rate of 2^-16. It is built and queried with
pyfusefilter's C implementation (the xor_singleheader library), called through the module's cffi `lib`
directly: its Python classes hash every item as a string, while the filter here is built straight from the
64-bit xxh3 fingerprints the index already stores (a numpy array in, about 70 ms per million keys) and asked
with the fingerprint a lookup already computed. pyfusefilter is pinned exactly in pyproject.toml because of
that. The encoded form adds its own header with checksums, so a damaged filter is detected, never trusted.

Encoded layout (little-endian, 32-byte header then the payload; docs/FORMAT.md):

  magic "MQKF" | version u16 = 1 | kind u16 (0 empty, 1 binary fuse 16) | distinct keys u64 |
  payload length u64 | payload CRC32C u32 | header CRC32C u32 (of the 28 bytes before it)

The payload of kind 1 is the library's own serialization: seed u64, size, segment length, segment count,
segment count length, array length (u32 each), then array length u16 fingerprints.
"""

from __future__ import annotations

import mmap
import os
import struct

import crc32c
import numpy as np

from index_file.errors import FormatError
from index_file.hashing import fingerprint
from index_file.native_compacted import ITEM_SIZE, CompactedIndexReader

MAGIC = b"MQKF"
VERSION = 1
KIND_EMPTY = 0
KIND_FUSE16 = 1
HEADER_SIZE = 32
FILTER_SUFFIX = ".filter"

_HEADER = struct.Struct("<4sHHQQII")
_FUSE_HEAD = struct.Struct("<QIIIII")  # the library's serialized binary_fuse16_t fields
_STRUCT_BYTES = 40  # the in-memory binary_fuse16_t besides its fingerprint array
assert _HEADER.size == HEADER_SIZE and _FUSE_HEAD.size == 28


def _fuse() -> tuple[object, object]:
    from pyfusefilter._xorfilter import ffi, lib

    return ffi, lib


def unique_fingerprints(fps: np.ndarray) -> np.ndarray:
    """The distinct values of a uint64 fingerprint array (sorted input is not required)."""
    a = np.asarray(fps, dtype=np.uint64)
    if len(a) == 0:
        return a
    if len(a) > 1 and not bool(np.all(a[1:] >= a[:-1])):
        a = np.sort(a)
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _header(kind: int, keys: int, payload: bytes) -> bytes:
    body = _HEADER.pack(MAGIC, VERSION, kind, keys, len(payload), crc32c.crc32c(payload), 0)
    return body[:28] + struct.pack("<I", crc32c.crc32c(body[:28]))


def encode_filter(fps: np.ndarray) -> bytes:
    """The encoded filter of a set of 64-bit fingerprints (duplicates allowed)."""
    keys = unique_fingerprints(fps)
    n = len(keys)
    if n == 0:
        return _header(KIND_EMPTY, 0, b"")
    ffi, lib = _fuse()
    f = ffi.new("binary_fuse16_t *")  # type: ignore[attr-defined]
    if not lib.binary_fuse16_allocate(n, f):  # type: ignore[attr-defined]
        raise MemoryError(f"cannot allocate a key filter of {n} keys")
    try:
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if not lib.binary_fuse16_populate(ffi.from_buffer("uint64_t[]", keys), n, f):  # type: ignore
            raise ValueError(f"a key filter of {n} keys could not be built")
        buf = ffi.new("char[]", lib.binary_fuse16_serialization_bytes(f))  # type: ignore[attr-defined]
        lib.binary_fuse16_serialize(f, buf)  # type: ignore[attr-defined]
        # serialization_bytes also counts the segment length mask, which serialize does not write (it is
        # derived from the segment length): the payload ends with the fingerprints
        payload = bytes(ffi.buffer(buf))[:_FUSE_HEAD.size + 2 * int(f.ArrayLength)]  # type: ignore
    finally:
        lib.binary_fuse16_free(f)  # type: ignore[attr-defined]
    return _header(KIND_FUSE16, n, payload) + payload


def _check_fuse_geometry(name: str, payload: bytes | memoryview) -> None:
    """The payload's own fields agree with its length, so no probe can reach past the array."""
    if len(payload) < _FUSE_HEAD.size:
        raise FormatError(name, "filter geometry", f"a {len(payload)}-byte payload cannot hold its fields")
    _seed, _size, seg_len, seg_count, seg_count_len, array_len = _FUSE_HEAD.unpack_from(payload, 0)
    ok = (seg_len > 0 and seg_len & (seg_len - 1) == 0
          and seg_count_len == seg_count * seg_len and array_len >= seg_count_len + 2 * seg_len
          and len(payload) == _FUSE_HEAD.size + 2 * array_len)
    if not ok:
        raise FormatError(name, "filter geometry", f"segment length {seg_len}, count {seg_count}, array "
                                                   f"{array_len} do not fit a {len(payload)}-byte payload")


def verify_filter(data: bytes | memoryview, name: str = "<filter>") -> tuple[int, int]:
    """Check an encoded filter whole (header, checksums, geometry); (kind, distinct keys). FormatError naming
    the failed check otherwise. `mqindex scrub` calls this on each filter it finds."""
    if len(data) < HEADER_SIZE:
        raise FormatError(name, "truncated", f"{len(data)} bytes is shorter than the {HEADER_SIZE}-byte header")
    magic, version, kind, keys, plen, pcrc, hcrc = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise FormatError(name, "magic", f"{bytes(magic)!r} is not the key filter magic {MAGIC!r}")
    if crc32c.crc32c(bytes(data[:28])) != hcrc:
        raise FormatError(name, "filter header crc32c", "the header's checksum does not match its bytes")
    if version != VERSION or kind not in (KIND_EMPTY, KIND_FUSE16):
        raise FormatError(name, "version", f"version {version}, kind {kind} not supported")
    payload = memoryview(data)[HEADER_SIZE:]
    if len(payload) != plen:
        raise FormatError(name, "file size", f"{len(payload)} payload bytes, the header says {plen}")
    if crc32c.crc32c(payload) != pcrc:
        raise FormatError(name, "filter crc32c", "the payload does not match its checksum")
    if kind == KIND_EMPTY and (plen or keys):
        raise FormatError(name, "filter geometry", "an empty filter with a payload or keys")
    if kind == KIND_FUSE16:
        _check_fuse_geometry(name, payload)
    return kind, keys


class KeyFilter:
    """A decoded filter held in memory: `may_contain(fp)` for a fingerprint, `nbytes` for its memory."""

    def __init__(self, data: bytes | memoryview, name: str = "<filter>") -> None:
        kind, keys = verify_filter(data, name)
        self.name = name
        self.kind = kind
        self.keys = keys
        self.encoded_bytes = len(data)
        self._f: object | None = None
        self.nbytes = _STRUCT_BYTES
        if kind == KIND_FUSE16:
            ffi, lib = _fuse()
            f = ffi.new("binary_fuse16_t *")  # type: ignore[attr-defined]
            if not lib.binary_fuse16_deserialize(f, ffi.from_buffer(bytes(data[HEADER_SIZE:]))):  # type: ignore
                raise MemoryError(f"{name}: cannot allocate the key filter")
            self._f = f
            self._contain = lib.binary_fuse16_contain  # type: ignore[attr-defined]
            self._free = lib.binary_fuse16_free  # type: ignore[attr-defined]
            self.nbytes += 2 * int(f.ArrayLength)  # type: ignore[attr-defined]

    def may_contain(self, fp: int) -> bool:
        """False: no key with this fingerprint is in the file. True: one may be (read the file)."""
        f = self._f
        if f is None:
            return self.kind != KIND_EMPTY  # a closed filter answers "maybe"
        return bool(self._contain(fp, f))

    def may_contain_key(self, topic: str, key: str) -> bool:
        return self.may_contain(fingerprint(topic, key))

    def close(self) -> None:
        f, self._f = self._f, None
        if f is not None:
            self.kind = -1
            self._free(f)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass


class MappedKeyFilter:
    """A filter file asked in place through a read-only memory map: nothing is copied or decoded, the
    library's `binary_fuse16_contain` reads the mapped fingerprint array (three 2-byte reads a key), so the
    page cache, not the process, holds the filter and mapping it again after an eviction costs an open and an
    mmap, not a read, checksum and copy of the whole file. `nbytes` is the mapped length (what an LRU bounded by
    bytes counts).

    The header, its checksum and the geometry are checked at every mapping; the payload's CRC32C (a pass over
    the whole file) only when `verified` does not hold the file's identity (device, inode, size, modification
    time), which is then added: a file is checked whole once per process and again whenever it is replaced."""

    def __init__(self, path: str | os.PathLike[str], verified: set[tuple[int, int, int, int]] | None = None) -> None:
        self.name = str(path)
        self._f: object | None = None
        self._mm: mmap.mmap | None = None
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if st.st_size < HEADER_SIZE:
                raise FormatError(self.name, "truncated",
                                  f"{st.st_size} bytes is shorter than the {HEADER_SIZE}-byte header")
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        # a map that fails its checks is unmapped when the error is dropped (views of it live in the traceback)
        if verified is not None and ident in verified:
            self.kind, self.keys = _check_header(mm, self.name)
        else:
            self.kind, self.keys = verify_filter(memoryview(mm), self.name)
            if verified is not None:
                verified.add(ident)
        self.encoded_bytes = self.nbytes = st.st_size
        self._mm = mm
        if self.kind == KIND_FUSE16:
            ffi, lib = _fuse()
            seed, size, seg_len, seg_count, seg_count_len, array_len = _FUSE_HEAD.unpack_from(mm, HEADER_SIZE)
            f = ffi.new("binary_fuse16_t *")  # type: ignore[attr-defined]
            f.Seed, f.Size, f.SegmentLength, f.SegmentLengthMask = seed, size, seg_len, seg_len - 1
            f.SegmentCount, f.SegmentCountLength, f.ArrayLength = seg_count, seg_count_len, array_len
            start = HEADER_SIZE + _FUSE_HEAD.size
            self._fps = ffi.from_buffer("uint16_t[]", memoryview(mm)[start:start + 2 * array_len])  # type: ignore
            f.Fingerprints = self._fps
            self._f = f
            self._contain = lib.binary_fuse16_contain  # type: ignore[attr-defined]

    def may_contain(self, fp: int) -> bool:
        """False: no key with this fingerprint is in the file. True: one may be (read the file)."""
        f = self._f
        if f is None:
            return self.kind != KIND_EMPTY
        return bool(self._contain(fp, f))

    def may_contain_key(self, topic: str, key: str) -> bool:
        return self.may_contain(fingerprint(topic, key))


def _check_header(data: bytes | mmap.mmap, name: str) -> tuple[int, int]:
    """The checks of `verify_filter` but the payload's CRC32C: header, its checksum, size and geometry."""
    magic, version, kind, keys, plen, _pcrc, hcrc = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise FormatError(name, "magic", f"{bytes(magic)!r} is not the key filter magic {MAGIC!r}")
    if crc32c.crc32c(bytes(data[:28])) != hcrc:
        raise FormatError(name, "filter header crc32c", "the header's checksum does not match its bytes")
    if version != VERSION or kind not in (KIND_EMPTY, KIND_FUSE16):
        raise FormatError(name, "version", f"version {version}, kind {kind} not supported")
    if len(data) - HEADER_SIZE != plen:
        raise FormatError(name, "file size", f"{len(data) - HEADER_SIZE} payload bytes, the header says {plen}")
    if kind == KIND_FUSE16:
        _check_fuse_geometry(name, memoryview(data)[HEADER_SIZE:])
    return kind, keys


def decode_filter(data: bytes | memoryview, name: str = "<filter>") -> KeyFilter:
    return KeyFilter(data, name)


def compacted_fingerprints(reader: CompactedIndexReader) -> np.ndarray:
    """The distinct fingerprints of a compacted file, read block by block (fingerprint columns only; every
    block's CRC32C is checked unless the reader verified them all at open)."""
    h = reader.header
    parts: list[np.ndarray] = []
    for b in range(h.block_count):
        start, end = h.block_range(b)
        n = (end - start) // ITEM_SIZE
        block = reader.source.read(start, end)
        if not reader._verified:
            reader._check_block(b, block)
        parts.append(np.frombuffer(block, dtype="<u8", count=n).copy())
    return unique_fingerprints(np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64))


def filter_for_compacted(reader: CompactedIndexReader) -> bytes:
    """The encoded key filter of a compacted file."""
    return encode_filter(compacted_fingerprints(reader))
