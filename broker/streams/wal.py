"""Write-ahead log on local disk: group commit with fsync before the ack, trim point, recovery scan.

Layout: a directory of segment files named by the logical offset of their first byte
(`00000000000000000000.wal`, ...) and a `trim` file holding the trim point. Each record is a 24-byte
header followed by its body, AutoMQ-style, all big-endian:

    magic 0x87654321 (4) | body length (4) | body offset (8) | body CRC32 (4) | header CRC32 (4)

The magic is the frame's version: 0x87654321 is version 1 (every frame written so far), and a later layout
takes 0x87654322, 0x87654323, ... (version = low byte - 0x20), keeping the header CRC of its first 20 bytes at
byte 20. A frame whose magic is a later version and whose header CRC checks is refused (`WalError` naming
the segment or object, the offset and both versions) instead of being taken for a torn tail: nothing is cut.

`body offset` is the record's logical WAL offset (where its header starts); the CRCs are zlib's CRC-32
(the same polynomial as Java's java.util.zip.CRC32 that AutoMQ uses); the header CRC covers the first
20 header bytes. A record never spans segments.

Group commit: producers call `append(body)` (or `append_async`) from any thread; one writer thread takes
every pending body, writes them with one write per segment, fdatasyncs (the data and the file size, not the
timestamps), and only then completes the appends.
Recovery (`Wal.open`) scans from the trim point and stops at the first invalid record (bad magic, a
length running past the file, a body offset that is not the record's position, a CRC mismatch): that
torn tail is truncated and later segments are removed, so the WAL holds exactly the acknowledged records.

Out of disk: a group commit that fails with ENOSPC, EDQUOT or EIO fails every pending append (none is
acknowledged, so none of their offsets is used) and pauses the WAL: appends raise `OutOfDisk` at once.
The writer cuts the segments back to the end of the acknowledged records (`_cut_tail`). `resume()`, called
when space has returned, redoes that cut if it could not be done, checks that the tail scans cleanly up to
that end, and lets appends in again. Any other write error fails the WAL for good, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from isal import isal_zlib

from broker.errors import OutOfDisk, WalError
from broker.streams.wal_trim import read_trim_file, write_trim_file
from storage_tier.disk_space import is_out_of_space
from storage_tier.durability import fsync_dir

log = logging.getLogger("mqindex.broker.wal")

MAGIC = 0x87654321
FRAME_VERSION = 1  # the version of the frames this version writes and reads (MAGIC's low byte - 0x20)
_MAGIC_FAMILY = MAGIC >> 8
_VERSION_BASE = 0x20
HEADER = struct.Struct(">IIqII")  # magic, body length, body offset, body crc, header crc
HEADER_SIZE = HEADER.size  # 24
_PRE_CRC = struct.Struct(">IIqI")  # the 20 bytes the header CRC covers
SEGMENT_SUFFIX = ".wal"
_SEGMENT_RE = re.compile(r"^(\d{20})\.wal$")
DEFAULT_SEGMENT_SIZE = 64 << 20
DEFAULT_MAX_BODY = 16 << 20
DEFAULT_MAX_BATCH = 4 << 20

assert HEADER_SIZE == 24


ISAL_GIL_FREE = 5 << 10  # isal_zlib.crc32 lets other threads run while it sums more than this many bytes
WHOLE_CRC_FROM = 1 << 20  # from this size a record is summed in one call, letting other threads run once


def _crc(data: bytes | memoryview) -> int:
    """The CRC-32 (zlib's polynomial) of a record's body or header, by ISA-L (carry-less multiply): about 1.5 us
    for 16 KiB and 23 us for 1 MiB, against zlib's 4 and 250. Like zlib's, ISA-L's crc32 lets other threads
    run while it sums more than 5 KiB, and the WAL thread then waits to take the GIL back, behind a busy
    listener, once per record of a group commit. So a record under WHOLE_CRC_FROM is summed in 5 KiB pieces,
    each keeping the GIL; a larger one in one call, its one wait spread over a MiB or more."""
    n = len(data)
    if n <= ISAL_GIL_FREE or n >= WHOLE_CRC_FROM:
        return isal_zlib.crc32(data) & 0xFFFFFFFF
    view = memoryview(data)
    crc = 0
    for i in range(0, n, ISAL_GIL_FREE):
        crc = isal_zlib.crc32(view[i:i + ISAL_GIL_FREE], crc)
    return crc & 0xFFFFFFFF


def encode_header(offset: int, body: bytes) -> bytes:
    pre = _PRE_CRC.pack(MAGIC, len(body), offset, _crc(body))
    return pre + struct.pack(">I", _crc(pre))


def encode_record(offset: int, body: bytes) -> bytes:
    return encode_header(offset, body) + body


@dataclass(frozen=True, slots=True)
class WalRecord:
    offset: int  # logical offset of the record's header
    body: bytes

    @property
    def next_offset(self) -> int:
        return self.offset + HEADER_SIZE + len(self.body)


@dataclass(frozen=True, slots=True)
class AppendResult:
    offset: int
    next_offset: int


# segments are written at their end only: O_APPEND, so no seek before a group commit's write
_SEGMENT_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def _writev_all(fd: int, parts: list[bytes]) -> None:
    """Write `parts` in order with as few system calls as the kernel allows (headers and bodies are written
    from where they lie: no copy into one buffer)."""
    i = 0
    while i < len(parts):
        chunk = parts[i:i + _IOV_MAX]
        n = os.writev(fd, chunk)
        for p in chunk:  # advance past what was written; a short write resumes inside a part
            if n >= len(p):
                n -= len(p)
                i += 1
            else:
                parts[i] = p[n:]
                break


def _segments(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.iterdir():
        m = _SEGMENT_RE.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def _segment_path(directory: Path, start: int) -> Path:
    return directory / f"{start:020d}{SEGMENT_SUFFIX}"


def _read_trim(directory: Path) -> int:
    return read_trim_file(directory)  # the trim file's layouts and versions: wal_trim.py


def frame_version(magic: int) -> int | None:
    """The frame version a WAL magic stands for (None: not a WAL frame magic)."""
    if magic >> 8 != _MAGIC_FAMILY or (magic & 0xFF) <= _VERSION_BASE:
        return None
    return (magic & 0xFF) - _VERSION_BASE


def _scan_segment(data: bytes, seg_start: int, from_offset: int, max_body: int,
                  where: str = "WAL") -> tuple[list[WalRecord], int, str]:
    """Valid records of one segment from `from_offset`; returns (records, end offset, why it stopped).
    Raises WalError at a frame of a later version (`where` names the segment or object in the message)."""
    records: list[WalRecord] = []
    pos = from_offset - seg_start
    mv = memoryview(data)
    while True:
        if pos == len(data):
            return records, seg_start + pos, ""
        if pos + HEADER_SIZE > len(data):
            return records, seg_start + pos, "torn header"
        magic, length, body_offset, body_crc, header_crc = HEADER.unpack_from(mv, pos)
        if magic != MAGIC:
            version = frame_version(magic)
            if version is not None and version > FRAME_VERSION and _crc(mv[pos:pos + 20]) == header_crc:
                raise WalError(f"{where}: the frame at offset {seg_start + pos} is of version {version}, newer than "
                               f"this version of mqindex reads ({FRAME_VERSION}): written by a newer version? "
                               f"Nothing was cut; upgrade this node (docs/OPERATIONS.md, Upgrading a cluster)")
            return records, seg_start + pos, f"bad magic 0x{magic:08x}"
        if _crc(mv[pos:pos + 20]) != header_crc:
            return records, seg_start + pos, "header CRC mismatch"
        if body_offset != seg_start + pos:
            return records, seg_start + pos, f"body offset {body_offset} is not the record position {seg_start + pos}"
        if length > max_body or pos + HEADER_SIZE + length > len(data):
            return records, seg_start + pos, f"body length {length} runs past the segment"
        body = mv[pos + HEADER_SIZE:pos + HEADER_SIZE + length]
        if _crc(body) != body_crc:
            return records, seg_start + pos, "body CRC mismatch"
        records.append(WalRecord(seg_start + pos, bytes(body)))
        pos += HEADER_SIZE + length


#: the record scan of one run of WAL bytes (a local segment or a shared WAL object)
scan_records = _scan_segment


@dataclass
class RecoveryReport:
    trim_offset: int
    end_offset: int
    records: int
    truncated_bytes: int
    stop_reason: str  # "" when the log ended cleanly


def scan(directory: str | os.PathLike[str], max_body: int = DEFAULT_MAX_BODY) -> tuple[list[WalRecord], RecoveryReport]:
    """Read-only recovery scan: the valid records from the trim point and where (and why) the scan stopped."""
    d = Path(directory)
    trim = _read_trim(d) if d.exists() else 0
    records: list[WalRecord] = []
    pos = trim
    reason = ""
    truncated = 0
    for start, path in _segments(d) if d.exists() else []:
        size = path.stat().st_size
        if reason or start > pos:
            reason = reason or f"segment {path.name} starts at {start}, expected {pos}"
            truncated += size
            continue
        if start + size <= pos and start != pos:
            continue  # wholly before the point already reached (trimmed or scanned)
        recs, end, why = _scan_segment(path.read_bytes(), start, pos, max_body, f"WAL segment {path}")
        records.extend(recs)
        pos = end
        if why:
            reason = f"{path.name} at offset {end}: {why}"
            truncated += start + size - end
    return records, RecoveryReport(trim, pos, len(records), truncated, reason)


class PendingAppend:
    """An append waiting for its group commit (the local WAL's and the shared WAL's writer threads)."""

    __slots__ = ("body", "future")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.future: Future[AppendResult] = Future()


class Wal:
    """`Wal.open(dir)` recovers and starts the group-commit writer; `recovered` holds the records found."""

    def __init__(self, directory: Path, segment_size: int, max_body: int, max_batch: int,
                 recovered: list[WalRecord], report: RecoveryReport) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.max_body = max_body
        self.max_batch = max_batch
        self.recovered = recovered
        self.report = report
        self._trim = report.trim_offset
        self._next = report.end_offset
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: deque[PendingAppend] = deque()
        self._closing = False
        self._failed: BaseException | None = None
        self._paused: OutOfDisk | None = None  # an out-of-disk episode: appends refused until resume()
        # the failed appends of an episode's group commit are being told (their callbacks roll their streams
        # back): resume() waits, or an append could be queued at an offset its stream is about to roll back
        self._settling = False
        self._dirty_fds: list[int] = []  # segments rolled over within the group commit in progress
        self.episodes = 0  # out-of-disk episodes seen (tests and metrics read it)
        segs = _segments(directory)
        if segs and segs[-1][0] <= self._next:
            self._seg_start, path = segs[-1]
        else:
            self._seg_start, path = self._next, _segment_path(directory, self._next)
        self._fd = os.open(path, _SEGMENT_FLAGS, 0o644)
        fsync_dir(directory)
        self.fsyncs = 0  # how many group commits ran (tests and metrics read it)
        #: called with the seconds each group commit's fsyncs took (the server's metrics set it)
        self.fsync_observer: Callable[[float], None] | None = None
        self._writer = threading.Thread(target=self._run, name=f"wal-writer-{directory.name}", daemon=True)
        self._writer.start()

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, segment_size: int = DEFAULT_SEGMENT_SIZE,
             max_body: int = DEFAULT_MAX_BODY, max_batch: int = DEFAULT_MAX_BATCH) -> Wal:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        records, report = scan(d, max_body)
        end = report.end_offset
        # cut the torn tail: truncate the segment holding the end, drop every later segment
        segs = _segments(d)
        for i, (start, path) in enumerate(segs):
            size = path.stat().st_size
            is_last_kept = i + 1 == len(segs) or segs[i + 1][0] > end
            if start > end:
                path.unlink()
            elif start + size > end:
                with open(path, "r+b") as f:
                    f.truncate(end - start)
                    f.flush()
                    os.fsync(f.fileno())
            elif start + size <= report.trim_offset and not is_last_kept:
                path.unlink()  # wholly below the trim point
        fsync_dir(d)
        return cls(d, segment_size, max_body, max_batch, records, report)

    # -- appends ---------------------------------------------------------------------------------
    def append_async(self, body: bytes) -> Future[AppendResult]:
        if len(body) > self.max_body:
            raise WalError(f"WAL record of {len(body)} bytes exceeds the {self.max_body}-byte limit")
        p = PendingAppend(bytes(body))
        with self._cond:
            if self._failed is not None:
                raise WalError(f"WAL {self.directory} failed earlier: {self._failed}")
            if self._paused is not None:
                raise OutOfDisk(self._paused.path, self._paused.detail)
            if self._closing:
                raise WalError(f"WAL {self.directory} is closed")
            self._queue.append(p)
            self._cond.notify()
        return p.future

    def append(self, body: bytes, timeout: float | None = None) -> AppendResult:
        """Append and return once the record is fsynced."""
        return self.append_async(body).result(timeout)

    @property
    def next_offset(self) -> int:
        with self._lock:
            return self._next

    @property
    def trim_offset(self) -> int:
        return self._trim

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue and self._closing:
                    return
                batch: list[PendingAppend] = []
                size = 0
                while self._queue and (not batch or size + len(self._queue[0].body) <= self.max_batch):
                    p = self._queue.popleft()
                    batch.append(p)
                    size += len(p.body) + HEADER_SIZE
            try:
                results = self._write_batch(batch)
            except BaseException as exc:  # noqa: BLE001 - every waiter must learn of the failure
                if self._fail_batch(batch, exc):
                    continue
                return
            for p, r in zip(batch, results, strict=True):
                p.future.set_result(r)

    def _fail_batch(self, batch: list[PendingAppend], exc: BaseException) -> bool:
        """Fail the group commit and everything queued behind it. Out of disk pauses the WAL (True: the
        writer goes on once resumed); any other error fails it for good (False)."""
        disk = is_out_of_space(exc)
        err: WalError
        failure: WalError | None = None  # the WAL's own failure (not out of disk), as later requests are told it
        behind: WalError | None = None  # for the appends queued behind the failed write (out of disk: the same)
        if disk:
            err = OutOfDisk(str(self.directory), f"WAL write failed: {exc}")
        else:
            # the failed write may have reached the disk (a restart replays what did); those behind it were not made.
            # The WAL's (and the node's) failure is said without either: a later request was not in that write
            failure = WalError(f"WAL {self.directory}: write failed: {exc}")
            err = WalError(f"{failure}; the records of this write may or may not be kept (a restart replays what "
                           "reached the disk)", failure)
            behind = WalError(f"{failure}; these records were not written", failure)
        with self._cond:
            if disk:
                self._paused = err  # type: ignore[assignment]
                self._settling = True
                self.episodes += 1
            else:
                self._failed = failure
            rest, self._queue = list(self._queue), deque()
        if disk:
            try:
                self._cut_tail()
            except OSError:
                pass  # resume() cuts it once space returns; appends stay refused until then
            except WalError as cut:  # the tail does not scan cleanly: _cut_tail failed the WAL for good; still,
                log.error("WAL tail could not be cut", extra={"wal": str(self.directory), "error": str(cut)})
                # every waiter below is told (the writer thread goes on to its end)
        # in WAL order: the failed group first, then what was queued behind it
        try:
            for p in batch:
                p.future.set_exception(err)
            for p in rest:
                p.future.set_exception(behind or err)
        finally:
            with self._cond:
                self._settling = False
        return disk

    def _cut_tail(self) -> None:
        """Bring the segments back to exactly the acknowledged records (end `_next`): truncate the torn
        write, drop segments begun after it, reopen the segment holding the end, check it scans cleanly."""
        with self._lock:
            end = self._next
        for fd in self._dirty_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._dirty_fds = []
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
        segs = _segments(self.directory)
        for start, path in segs:
            size = path.stat().st_size
            if start > end:
                path.unlink()
            elif start + size > end:
                with open(path, "r+b") as f:
                    f.truncate(end - start)
                    f.flush()
                    os.fsync(f.fileno())
        fsync_dir(self.directory)
        kept = [(start, path) for start, path in _segments(self.directory) if start <= end]
        seg_start, path = kept[-1] if kept else (end, _segment_path(self.directory, end))
        scan_from = max(seg_start, self._trim)
        if path.exists() and scan_from < end:
            _, scanned_end, why = _scan_segment(path.read_bytes(), seg_start, scan_from, self.max_body,
                                                f"WAL segment {path}")
            if scanned_end != end or why:
                err = WalError(f"WAL {self.directory}: tail of {path.name} does not scan cleanly to the "
                               f"acknowledged end {end} (stopped at {scanned_end}: {why or 'end of file'})")
                with self._cond:
                    self._failed = err
                raise err
        with self._lock:
            self._seg_start = seg_start
        self._fd = os.open(path, _SEGMENT_FLAGS, 0o644)
        fsync_dir(self.directory)

    @property
    def paused(self) -> OutOfDisk | None:
        """The out-of-disk error appends get while the episode lasts (None when writing)."""
        return self._paused

    def resume(self) -> bool:
        """Space has returned: check (and if needed cut) the tail, then accept appends again. False when the
        disk still refuses, or while the failed appends are still being told (the WAL stays paused)."""
        with self._cond:
            if self._paused is None:
                return True
            if self._failed is not None or self._settling:
                return False
        try:  # cut (again, if it already ran when the episode began) and check the tail before writing on it
            self._cut_tail()
        except OSError:
            return False
        with self._cond:
            self._paused = None
        return True

    def _write_batch(self, batch: list[PendingAppend]) -> list[AppendResult]:
        results: list[AppendResult] = []
        buf: list[bytes] = []
        dirty = self._dirty_fds = []
        offset = self._next
        for p in batch:
            rec_size = HEADER_SIZE + len(p.body)
            if offset - self._seg_start + rec_size > self.segment_size and offset > self._seg_start:
                if buf:
                    _writev_all(self._fd, buf)
                    buf = []
                dirty.append(self._fd)
                with self._lock:
                    self._seg_start = offset
                self._fd = os.open(_segment_path(self.directory, offset), _SEGMENT_FLAGS | os.O_EXCL, 0o644)
                fsync_dir(self.directory)
            buf += (encode_header(offset, p.body), p.body)
            results.append(AppendResult(offset, offset + rec_size))
            offset += rec_size
        if buf:
            _writev_all(self._fd, buf)
        synced = time.perf_counter()
        # fdatasync: the data and the file size (what reading the records back needs), not the timestamps
        while dirty:  # popped once closed, so a failure here never closes a descriptor twice
            os.fdatasync(dirty[0])
            os.close(dirty.pop(0))
        os.fdatasync(self._fd)
        self.fsyncs += 1
        if self.fsync_observer is not None:
            self.fsync_observer(time.perf_counter() - synced)
        with self._lock:
            self._next = offset
        return results

    # -- trim ------------------------------------------------------------------------------------
    def trim(self, offset: int) -> None:
        """Records below `offset` (a record boundary from an AppendResult) are no longer needed."""
        with self._lock:
            if offset < self._trim or offset > self._next:
                raise WalError(f"trim offset {offset} outside [{self._trim}, {self._next}]")
            seg_start = self._seg_start
        write_trim_file(self.directory, offset)
        self._trim = offset
        for start, path in _segments(self.directory):
            if start < seg_start and start + path.stat().st_size <= offset:
                path.unlink()
        fsync_dir(self.directory)

    def close(self) -> None:
        """Finish every pending append, then stop the writer."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._writer.join()
        try:
            os.close(self._fd)
        except OSError:
            pass

    def __enter__(self) -> Wal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[WalRecord]:
        return iter(scan(self.directory, self.max_body)[0])
