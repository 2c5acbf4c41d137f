"""DiskSpace: the free-space floor of the node's data paths and its out-of-disk episodes.

    disk = DiskSpace(min_free_bytes=None)          # None: 1% of each filesystem or 256 MiB, whichever is smaller
    disk.watch("wal", wal_dir); disk.watch("index", index_dir); disk.watch("objects", local_store_root)
    disk.check_write("wal", nbytes)                # raises OutOfDisk (and starts an episode) below the floor
    with disk.reserve("wal", nbytes): ...          # several writes checked at once: none refused one by one
    disk.enter("wal", path, detail)                # a write failed with ENOSPC / EDQUOT / EIO
    disk.on_resume.append(wal.resume)              # called once every watched path is above its floor again
    disk.start(); ...; disk.stop()                 # the poll thread that ends episodes by itself

The floor makes the node refuse writes before a filesystem is really full, so that a clean stop (state
records, closing) and the next start (metadata, recovery) always find room. An episode starts when a write
would cross the floor, when a watched path is found below it, or when the filesystem refused a write; while
it lasts `episode` names the path and why, produce answers OutOfDisk, reads go on. The poll thread ends it
when every watched path is above its floor and every resume hook (the WAL checks and cuts its tail) agrees.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.errors import OutOfDisk
from broker.periodic import Periodic
from storage_tier import BlobStore
from storage_tier.disk_space import free_bytes, is_out_of_space, total_bytes
from storage_tier.local_store import LocalStore

log = logging.getLogger("mqindex.broker.disk")

DEFAULT_FLOOR_CAP = 256 << 20  # the default floor: 1% of the filesystem, at most this
DEFAULT_POLL_S = 0.5
# A write far above the floor is checked against the last free-space reading, less what was checked since, if
# that reading is this recent (seconds) and leaves this margin above the floor (bytes); near the floor, or once
# the reading is older, the filesystem is asked again. Asking on every write (statvfs) let the caller's thread
# drop the GIL twice per Kafka produce request and wait to take it back: a tenth of the listener's time.
READING_FRESH_S = 0.02
READING_MARGIN = 64 << 20


def default_floor(total: int) -> int:
    return min(DEFAULT_FLOOR_CAP, total // 100)


@dataclass(frozen=True)
class Episode:
    name: str  # the watched path's role: wal, index, objects
    path: str
    detail: str
    since: float  # time.time() when it began
    # the refused write's size: the episode ends only when that write would now fit above the floor, so a
    # write refused with the free space just above the floor does not end and begin episodes over and over
    needed: int = 0

    def error(self) -> OutOfDisk:
        return OutOfDisk(self.path, self.detail)


@dataclass(frozen=True)
class PathSpace:
    name: str
    path: str
    free: int
    floor: int


class DiskSpace:
    def __init__(self, min_free_bytes: int | None = None, poll_interval_s: float = DEFAULT_POLL_S) -> None:
        if min_free_bytes is not None and min_free_bytes < 0:
            raise ValueError(f"min_free_bytes must be >= 0, got {min_free_bytes}")
        self.min_free_bytes = min_free_bytes
        self._paths: dict[str, tuple[Path, int]] = {}  # name -> (path, floor)
        # name -> (time.monotonic() of the reading, its free bytes less every write checked since)
        self._readings: dict[str, tuple[float, int]] = {}
        self._reading_lock = threading.Lock()
        self._reserved = threading.local()  # .names: the watched paths this thread holds a reservation of
        self._lock = threading.Lock()
        self._episode: Episode | None = None
        self.episodes = 0  # episodes begun (metrics, tests)
        self.resumes = 0  # episodes ended by the poll thread
        self.on_resume: list[Callable[[], bool]] = []
        self._poller = Periodic("disk-space", poll_interval_s, self.poll)

    # -- paths ------------------------------------------------------------------------------------
    def watch(self, name: str, path: str | Path) -> None:
        """Watch a data path (created if missing); its floor comes from its filesystem's size."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        floor = self.min_free_bytes if self.min_free_bytes is not None else default_floor(total_bytes(p))
        self._paths[name] = (p, floor)

    def watching(self, name: str) -> bool:
        return name in self._paths

    def spaces(self) -> list[PathSpace]:
        """Free bytes and floor of each watched path, now (a path that cannot be read counts as 0 free)."""
        out = []
        for name, (p, floor) in self._paths.items():
            try:
                free = free_bytes(p)
            except OSError:
                free = 0
            out.append(PathSpace(name, str(p), free, floor))
        return out

    # -- episodes ---------------------------------------------------------------------------------
    @property
    def episode(self) -> Episode | None:
        return self._episode

    def check_writable(self) -> None:
        """Raise the episode's OutOfDisk while one lasts."""
        ep = self._episode
        if ep is not None:
            raise ep.error()

    def check_write(self, name: str, nbytes: int) -> None:
        """Before writing `nbytes` under the watched path `name`: refuse (and begin an episode) when the
        write would leave less than the floor free. Far above the floor a recent reading serves (less what
        was checked since it, READING_FRESH_S, READING_MARGIN); near it the filesystem is read for each write."""
        if name in getattr(self._reserved, "names", ()):
            return  # checked with the reservation this thread holds
        self.check_writable()
        entry = self._paths.get(name)
        if entry is None:
            return
        p, floor = entry
        now = time.monotonic()
        with self._reading_lock:  # several threads check: each write is taken off the reading once
            reading = self._readings.get(name)
            if reading is not None and now - reading[0] < READING_FRESH_S and \
                    reading[1] - nbytes >= floor + READING_MARGIN:
                self._readings[name] = (reading[0], reading[1] - nbytes)
                return
        free = free_bytes(p)  # outside the lock: it lets other threads run
        with self._reading_lock:
            self._readings[name] = (now, free - nbytes)
        if free - nbytes < floor:
            ep = self.enter(name, str(p), f"{free} bytes free, a write of {nbytes} bytes would cross the "
                                          f"free-space floor of {floor} bytes", needed=nbytes)
            raise ep.error()

    @contextlib.contextmanager
    def reserve(self, name: str, nbytes: int) -> Iterator[None]:
        """Check `nbytes` of writes under `name` at once (as `check_write` does); until the block ends, this
        thread's writes there are not checked again, so none of them is refused after the others were made (an
        HTTP produce over several partitions is queued whole or refused whole, even when the disk fills between
        its room check and its appends)."""
        self.check_write(name, nbytes)
        names: set[str] = getattr(self._reserved, "names", set())
        if name in names:  # nested: the outer block holds it
            yield
            return
        self._reserved.names = names | {name}
        try:
            yield
        finally:
            self._reserved.names = names

    def short_of_room(self, name: str, nbytes: int) -> PathSpace | None:
        """The watched path `name` (its free bytes and floor, now) when writing `nbytes` there would leave less
        than its floor free; None when it would not, or `name` is not watched. Unlike `check_write`, another
        path's episode does not count: an upload into a local object store asks about that store only."""
        entry = self._paths.get(name)
        if entry is None:
            return None
        try:
            free = free_bytes(entry[0])
        except OSError:
            free = 0
        return PathSpace(name, str(entry[0]), free, entry[1]) if free - nbytes < entry[1] else None

    def below_floor(self, name: str) -> bool:
        """Whether the watched path `name` has less than its floor free now (False when not watched)."""
        entry = self._paths.get(name)
        if entry is None:
            return False
        try:
            return free_bytes(entry[0]) < entry[1]
        except OSError:
            return True

    def enter(self, name: str, path: str, detail: str, needed: int = 0) -> Episode:
        """Begin an out-of-disk episode (or return the one under way)."""
        with self._lock:
            if self._episode is not None:
                return self._episode
            self._episode = ep = Episode(name, path, detail, time.time(), needed)
            self.episodes += 1
        log.error("out of disk: not accepting writes until space returns",
                  extra={"path": path, "data_path": name, "detail": detail})
        return ep

    def poll(self) -> bool:
        """One look: begin an episode for a path below its floor, or end the one under way once every path
        is above its floor (the episode's path with room for the write it refused) and every resume hook
        succeeds. Returns whether writes are accepted."""
        spaces = self.spaces()
        low = [s for s in spaces if s.free < s.floor]
        ep = self._episode
        if ep is None:
            if low:
                s = low[0]
                self.enter(s.name, s.path, f"{s.free} bytes free, below the free-space floor of {s.floor} bytes")
                return False
            return True
        if low or any(s.name == ep.name and s.free - ep.needed < s.floor for s in spaces):
            return False
        for hook in self.on_resume:
            if not hook():
                return False
        with self._lock:
            if self._episode is not ep:
                return self._episode is None
            self._episode = None
            self.resumes += 1
        log.info("disk space returned: accepting writes again", extra={
            "path": ep.path, "data_path": ep.name, "seconds": round(time.time() - ep.since, 3),
            "free": {s.name: s.free for s in spaces}})
        return True

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> None:
        self._poller.stop()


def watch_data_paths(disk: DiskSpace, index_dir: Path, store: BlobStore) -> None:
    """Watch the node's other data paths: the index folders, and the object store when it is a local folder."""
    disk.watch("index", index_dir)
    if isinstance(store, LocalStore):
        disk.watch("objects", store.root)


def tolerate_out_of_disk(step: Callable[[], object], what: str) -> bool:
    """Run a start-up step that writes; out of disk, log it and go on (the node starts refusing writes and
    resumes by itself). Returns whether the step ran to its end."""
    try:
        step()
        return True
    except Exception as exc:
        if not (isinstance(exc, OutOfDisk) or is_out_of_space(exc)):
            raise
        log.warning("out of disk at start: deferred until space returns", extra={"step": what, "error": str(exc)})
        return False
