"""Key filters of the service's sealed files: where they are kept, and a memory-bounded cache of them.

Every compacted file gets a key filter (index_file/key_filter.py) before it is served or published:

    compacted/<stem>.filter    beside a COMPACTED file, written by the compaction before the file is served
    uploaded/<stem>.filter     beside an UPLOADED file's manifest, written before the manifest
    <store key>.filter         beside the uploaded object in the store, put before the manifest is written
                               (so a published file, the service's own, a rescued one or one a departed node
                               published, always has its filter)

A file built outside the service (Spark) gets its filter when the service adopts it, before serving it: the
builder's `<key>.filter` if it put one, else one built from the object's fingerprint columns (`adopt_filter`).

A lookup asks `FilterCache.may_contain(file, fingerprint)` before it reads a file. Filters are loaded
lazily on first use (the local copy, else the store's, which is then kept locally) and held in an LRU
bounded by bytes (`ServiceConfig.filter_cache_bytes`). A filter that is missing or fails its checks in both
places means "read the file": never a wrong answer; it is logged once per file (`mqindex.index_service.
filters`, naming the file and the check) and counted (`LookupStats.filters_unusable`).

A local filter file of `MAP_MIN_BYTES` or more is memory-mapped (index_file.key_filter.MappedKeyFilter) rather
than read: the lookup asks the mapped fingerprint array in place, the page cache holds the pages, and the LRU
counts the mapped bytes. An evicted filter is mapped again at its next use, an open and an mmap (tens of
microseconds) instead of reading, checking and copying megabytes: when a long history's filters outgrow the
bound, a lookup no longer pays for the evicted ones in CPU. Its payload checksum is checked the first time this
process maps that file (and again if the file is replaced); the header and geometry at every mapping.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from pathlib import Path

import numpy as np

from index_file.errors import FormatError
from index_file.key_filter import (
    FILTER_SUFFIX,
    KeyFilter,
    MappedKeyFilter,
    encode_filter,
    unique_fingerprints,
    verify_filter,
)
from index_file.native_compacted import ITEM_SIZE, CompactedIndexReader
from index_service.lookup_stats import LookupStats, count_get
from index_service.managed_file import ManagedFile
from index_service.model import FileState
from index_service.state_folders import COMPACTED, UPLOADED, StateFolders
from storage_tier.errors import BlobNotFound

log = logging.getLogger("mqindex.index_service.filters")

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: a local filter file this large or larger is memory-mapped, a smaller one read into memory (a mapping holds a
#: file descriptor; small filters are cheap to read again)
MAP_MIN_BYTES = 256 * 1024
#: mapped filters held at most, whatever the byte bound (each holds a file descriptor)
MAX_MAPPED = 4096


def filter_key(object_key: str) -> str:
    """The store key of an uploaded index file's filter."""
    return object_key + FILTER_SUFFIX


def local_filter_path(folders: StateFolders, stem: str, state: FileState) -> Path:
    folder = UPLOADED if state is FileState.UPLOADED else COMPACTED
    return folders.path(folder, stem + FILTER_SUFFIX)


def write_local_filter(folders: StateFolders, dest: Path, data: bytes) -> None:
    """Crash-safe write of a filter file: scratch, fsync, rename, fsync the folder."""
    scratch = folders.scratch(f"{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    scratch.write_bytes(data)
    folders.publish(scratch, dest)


def check_filter_object(store: object, object_key: str) -> str | None:
    """For scrub: None when the filter of the uploaded file `object_key` is in the store and passes every check,
    else what is wrong with it ("missing", or the failed check)."""
    key = filter_key(object_key)
    try:
        data = store.get(key)  # type: ignore[attr-defined]
    except BlobNotFound:
        return "missing"
    try:
        verify_filter(data, key)
    except FormatError as exc:
        return exc.check
    return None


def remote_fingerprints(reader: CompactedIndexReader, blocks_per_get: int = 32) -> np.ndarray:
    """The distinct fingerprints of a compacted file in the store, read `blocks_per_get` blocks (2 MiB) a
    ranged GET, each block checked against its CRC32C; only the fingerprint columns are kept."""
    h = reader.header
    parts: list[np.ndarray] = []
    for first in range(0, h.block_count, blocks_per_get):
        last = min(h.block_count, first + blocks_per_get)
        start, end = h.block_range(first)[0], h.block_range(last - 1)[1]
        data = memoryview(reader.source.read(start, end))
        for b in range(first, last):
            bs, be = (x - start for x in h.block_range(b))
            reader._check_block(b, data[bs:be])
            parts.append(np.frombuffer(data, dtype="<u8", count=(be - bs) // ITEM_SIZE, offset=bs).copy())
    return unique_fingerprints(np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64))


def adopt_filter(folders: StateFolders, store: object, stem: str, reader: CompactedIndexReader,
                 object_key: str) -> None:
    """Keep the filter of an uploaded file registered from outside the service (a Spark build) beside its
    manifest before it is served: the builder's `<key>.filter` when it put one that passes its checks, else one
    built from the object's fingerprint columns (ranged GETs, once). A file whose object fails its checks is
    served without a filter (every lookup reads it and reports the damage)."""
    dest = local_filter_path(folders, stem, FileState.UPLOADED)
    if dest.exists():
        return
    key = filter_key(object_key)
    try:
        data = store.get(key)  # type: ignore[attr-defined]
        verify_filter(data, key)
    except (BlobNotFound, FormatError):
        try:
            data = encode_filter(remote_fingerprints(reader))
        except FormatError as exc:
            log.warning("no key filter for a damaged index file", extra={"file": stem, "object": object_key,
                                                                         "check": exc.check, "error": str(exc)})
            return
    write_local_filter(folders, dest, bytes(data))


class _Unusable:
    """Cached verdict for a file without a usable filter: read it (the verdict costs no memory to speak of)."""

    nbytes = 64


_UNUSABLE = _Unusable()


class FilterCache:
    def __init__(self, folders: StateFolders, store: object | None, max_bytes: int, stats: LookupStats) -> None:
        self.folders = folders
        self.store = store
        self.max_bytes = max_bytes
        self.stats = stats
        self._lru: OrderedDict[str, KeyFilter | MappedKeyFilter | _Unusable] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._logged: set[str] = set()
        self._verified: set[tuple[int, int, int, int]] = set()  # filter files whose payload checksum passed
        self._mapped = 0
        self.map_min_bytes = MAP_MIN_BYTES

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._lru)

    def may_contain(self, mf: ManagedFile, fp: int) -> bool:
        """False only when the file's filter says no entry of the fingerprint is in it."""
        if mf.state not in (FileState.COMPACTED, FileState.UPLOADED):
            return True  # unsealed files and RocketMQ imports have no filter: read them
        with self._lock:
            f = self._lru.get(mf.stem)
            if f is not None:
                self._lru.move_to_end(mf.stem)
        if f is None:
            f, keep = self._load(mf)
            if keep:
                self._keep(mf.stem, f)
        if isinstance(f, _Unusable):
            return True
        return f.may_contain(fp)

    def forget(self, stem: str) -> None:
        """Drop a file's filter (the file expired or changed state)."""
        with self._lock:
            f = self._lru.pop(stem, None)
            if f is not None:
                self._bytes -= f.nbytes
                self._mapped -= isinstance(f, MappedKeyFilter)

    def _open_local(self, path: Path) -> KeyFilter | MappedKeyFilter:
        """The local filter file, mapped when large (FileNotFoundError, FormatError, OSError otherwise)."""
        if path.stat().st_size >= self.map_min_bytes:
            return MappedKeyFilter(path, self._verified)
        return KeyFilter(path.read_bytes(), str(path))

    def _keep(self, stem: str, f: KeyFilter | MappedKeyFilter | _Unusable) -> None:
        if f.nbytes > self.max_bytes:
            return  # used for this lookup only; the bound holds
        with self._lock:
            old = self._lru.pop(stem, None)
            if old is not None:
                self._bytes -= old.nbytes
                self._mapped -= isinstance(old, MappedKeyFilter)
            self._lru[stem] = f
            self._bytes += f.nbytes
            self._mapped += isinstance(f, MappedKeyFilter)
            while (self._bytes > self.max_bytes or self._mapped > MAX_MAPPED) and self._lru:
                # an evicted filter is freed (unmapped) once no lookup holds it any more (never under a reader)
                _stem, gone = self._lru.popitem(last=False)
                self._bytes -= gone.nbytes
                self._mapped -= isinstance(gone, MappedKeyFilter)

    def _unusable(self, mf: ManagedFile, where: str, check: str) -> _Unusable:
        self.stats.add(filters_unusable=1)
        with self._lock:
            first = mf.stem not in self._logged
            self._logged.add(mf.stem)
        if first:
            log.warning("index file has no usable key filter; lookups read the file",
                        extra={"file": mf.stem, "object": mf.remote_key or mf.location, "filter": where,
                               "check": check})
        return _UNUSABLE

    def _load(self, mf: ManagedFile) -> tuple[KeyFilter | MappedKeyFilter | _Unusable, bool]:
        """(filter or the read-the-file verdict, whether to keep it): a store that did not answer is asked
        again at the next lookup."""
        path = local_filter_path(self.folders, mf.stem, mf.state)
        local_check = "missing"
        try:
            return self._open_local(path), True
        except FileNotFoundError:
            pass
        except FormatError as exc:
            local_check = exc.check
        except OSError as exc:
            local_check = f"unreadable: {exc}"
        if mf.state is not FileState.UPLOADED or self.store is None or mf.remote_key is None:
            return self._unusable(mf, str(path), local_check), True
        key = filter_key(mf.remote_key)
        try:
            count_get()
            data = self.store.get(key)  # type: ignore[attr-defined]
            f = KeyFilter(data, key)
        except BlobNotFound:
            return self._unusable(mf, f"{path} ({local_check}), {key} (missing)", "missing"), True
        except FormatError as exc:
            return self._unusable(mf, f"{path} ({local_check}), {key} ({exc.check})", exc.check), True
        except Exception as exc:  # noqa: BLE001 - the store did not answer: read the file this time
            log.warning("could not fetch a key filter; the file is read", extra={
                "file": mf.stem, "object": key, "error": f"{type(exc).__name__}: {exc}"})
            return _UNUSABLE, False
        try:
            write_local_filter(self.folders, path, bytes(data))  # the next cold start finds it locally
        except OSError as exc:
            log.warning("could not keep a key filter locally", extra={"file": mf.stem, "path": str(path),
                                                                       "error": str(exc)})
            return f, True
        if len(data) >= self.map_min_bytes:
            try:
                return MappedKeyFilter(path, self._verified), True  # held by the page cache, not the process
            except (FormatError, OSError):
                pass
        return f, True


class ObjectFilters:
    """Filters of uploaded files known only by their store key (files another node published): fetched from the
    store on first use (one GET each), held in an LRU bounded by bytes. A missing or damaged filter, or a store
    that does not answer, means "read the file"."""

    def __init__(self, store: object, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._lru: OrderedDict[str, KeyFilter | _Unusable] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def may_contain(self, object_key: str, topic: str, key: str) -> bool:
        with self._lock:
            f = self._lru.get(object_key)
            if f is not None:
                self._lru.move_to_end(object_key)
        if f is None:
            f = self._fetch(object_key)
            if f is None:
                return True
            if f.nbytes <= self.max_bytes:
                with self._lock:
                    old = self._lru.pop(object_key, None)
                    self._bytes += f.nbytes - (old.nbytes if old is not None else 0)
                    self._lru[object_key] = f
                    while self._bytes > self.max_bytes:
                        self._bytes -= self._lru.popitem(last=False)[1].nbytes
        if isinstance(f, _Unusable):
            return True
        return f.may_contain_key(topic, key)

    def _fetch(self, object_key: str) -> KeyFilter | _Unusable | None:
        key = filter_key(object_key)
        try:
            count_get()
            return KeyFilter(self.store.get(key), key)  # type: ignore[attr-defined]
        except (BlobNotFound, FormatError) as exc:
            log.warning("index file has no usable key filter; lookups read the file",
                        extra={"object": object_key, "filter": key,
                               "check": exc.check if isinstance(exc, FormatError) else "missing"})
            return _UNUSABLE
        except Exception as exc:  # noqa: BLE001 - the store did not answer: read the file this time
            log.warning("could not fetch a key filter; the file is read",
                        extra={"object": key, "error": f"{type(exc).__name__}: {exc}"})
            return None
