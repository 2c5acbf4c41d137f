"""Which prefix of the WAL is no longer needed: every record in it is committed to object storage.

Appends register a slot in WAL order (the caller holds the lock that orders its `Wal.append_async`
calls); the slot learns its WAL position when the append completes. After an upload commits, the
streams' committed ends advance and `trim_point()` pops the leading slots whose records are committed
(or were appended for a stream this node gave up, see `forget_stream`), returning the WAL offset to trim to.

Giving a stream up releases the slots it has then, not the stream id: when the stream comes back to this node
(a reassignment, a rebalance, a failover back), its new appends hold the trim point again until committed.

The trim point is kept in the WAL directory's `trim` file (`read_trim_file`, `write_trim_file`). Its version 1
is the 12-byte layout every version so far wrote and this one still writes (so a node can be started again on
0.3.0 over the same directory): the offset (8 bytes, big-endian, signed) and the CRC32 of those 8 bytes (4).
A later layout is longer than 12 bytes and starts with the magic `MQWT`, its version (4 bytes, big-endian,
2 and up) and the CRC32 of those 8 bytes (4); what follows is the version's own. A file of that form whose header
CRC checks is refused as newer (`WalError` naming the file and both versions); anything else that is not a valid
version 1 file is refused as damage. Either way nothing in the WAL is touched.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from isal import isal_zlib

from broker.errors import WalError
from storage_tier.durability import fsync_dir

TRIM_FILE = "trim"
TRIM_VERSION = 1  # the trim file version this version writes and reads
TRIM_MAGIC = b"MQWT"  # starts every layout after version 1
_V1 = struct.Struct(">qI")  # offset, CRC32 of the offset's 8 bytes
_LATER = struct.Struct(">4sII")  # magic, version, CRC32 of the magic and version


def _crc(data: bytes) -> int:
    return isal_zlib.crc32(data) & 0xFFFFFFFF


def read_trim_file(directory: Path) -> int:
    """The trim point stored in `directory` (0 when there is no trim file). WalError when the file is of a newer
    version than this version reads, or damaged; the message names the file."""
    p = directory / TRIM_FILE
    if not p.exists():
        return 0
    data = p.read_bytes()
    if len(data) == _V1.size:
        offset, crc = _V1.unpack(data)
        if crc == _crc(data[:8]):
            return int(offset)
    elif len(data) > _V1.size:
        magic, version, crc = _LATER.unpack_from(data)
        if magic == TRIM_MAGIC and crc == _crc(data[:8]) and version > TRIM_VERSION:
            raise WalError(f"WAL {directory}: trim file {p} is of version {version}, newer than this version of "
                           f"mqindex reads ({TRIM_VERSION}); it is left as it is: upgrade this node")
    raise WalError(f"WAL {directory}: trim file {p} is corrupt ({len(data)} bytes)")


def write_trim_file(directory: Path, offset: int) -> None:
    """Store the trim point `offset` (version 1) durably: a temporary file, fsynced, renamed over the old one."""
    tmp = directory / (TRIM_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_V1.pack(offset, _crc(struct.pack(">q", offset))))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / TRIM_FILE)
    fsync_dir(directory)


@dataclass(eq=False)  # a slot is one append: discard() removes that one
class WalSlot:
    stream_id: int
    last_offset: int  # the stream offset after the record (exclusive end)
    wal_next: int | None = None  # WAL offset after the record, once durable
    released: bool = False  # appended for a stream this node gave up: it does not hold the trim point back
    wal_start: int | None = None  # WAL offset of the record's header, once durable


class WalTrimTracker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: deque[WalSlot] = deque()
        self._committed: dict[int, int] = {}

    def add(self, slot: WalSlot) -> None:
        with self._lock:
            self._slots.append(slot)

    def discard(self, slot: WalSlot) -> None:
        """A failed append: its slot never gets a WAL position and must not hold the trim point back."""
        with self._lock:
            try:
                self._slots.remove(slot)
            except ValueError:
                pass

    def committed(self, ends: dict[int, int]) -> None:
        """Streams' ends now in object storage."""
        with self._lock:
            for sid, end in ends.items():
                if end > self._committed.get(sid, -1):
                    self._committed[sid] = end

    def forget_stream(self, stream_id: int) -> None:
        """This node no longer owns the stream: the WAL records it appended for it so far must not hold the trim
        point back. Records appended after the stream is opened here again do, until they are committed."""
        with self._lock:
            for s in self._slots:
                if s.stream_id == stream_id:
                    s.released = True

    def release(self, slots: list[WalSlot]) -> None:
        """These slots no longer hold the trim point back (records no one will commit: see wal_holds.py)."""
        with self._lock:
            for s in slots:
                s.released = True

    def ranges_of(self, stream_id: int, above: int) -> list[tuple[int, int]]:
        """WAL ranges [start, next) of the durable records of a stream held here that end after `above`, in order
        (what a move lends to the next owner of the stream)."""
        with self._lock:
            return [(s.wal_start, s.wal_next) for s in self._slots
                    if s.stream_id == stream_id and not s.released and s.last_offset > above
                    and s.wal_start is not None and s.wal_next is not None]

    def trim_point(self) -> int | None:
        """The WAL offset below which every record is committed (None: nothing new to trim)."""
        point = None
        with self._lock:
            while self._slots:
                s = self._slots[0]
                if s.wal_next is None:
                    break
                if not s.released and self._committed.get(s.stream_id, -1) < s.last_offset:
                    break
                point = s.wal_next
                self._slots.popleft()
        return point

    def __len__(self) -> int:
        return len(self._slots)
