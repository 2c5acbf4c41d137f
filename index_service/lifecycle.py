"""The crash-safe state transitions of one file: compact, upload, expire.

Each writes its output to compacting/ first, fsyncs it, renames it into the next state's folder,
fsyncs that folder, swaps the file's form in the map (queries move from the old form to the new
one), and only then removes the previous form. A crash at any point leaves either the old form, or
both forms (recovery keeps the newer one after verifying it), never neither.

A compacted file's key filter (key_filters.py) is written beside it before the file is served, put beside
the object in the store after the upload is verified and written beside the manifest before the manifest
(an upload whose local filter is missing or damaged builds it again from the compacted file first).

Named crash points (ServiceConfig.crash_hook) mark each step for the crash tests:
  compact:scratch-written, compact:published, compact:done
  upload:put-done, upload:verified, upload:filter-written, upload:manifest-written, upload:done
  expire:manifest-removed, expire:done
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from dataclasses import dataclass, field

import crc32c

from index_file import CompactedIndexReader, FormatError, compact
from index_file.key_filter import filter_for_compacted, verify_filter
from index_file.native_compacted import HEADER_SIZE, CompactedHeader
from index_service import ranges
from index_service.config import ServiceConfig
from index_service.file_map import FileMap
from index_service.key_filters import FilterCache, filter_key, local_filter_path, write_local_filter
from index_service.managed_file import ManagedFile
from index_service.model import FileState
from index_service.remote_source import CachedSummarySource
from index_service.state_folders import StateFolders
from storage_tier.file_upload import put_file, stored_crc

log = logging.getLogger("mqindex.index_service.lifecycle")

REMOTE_PREFIX = "index/"


class UploadVerifyError(RuntimeError):
    """The object read back from the store does not match the local file (size or CRC32C)."""


def remote_key(stem: str, prefix: str = REMOTE_PREFIX) -> str:
    return f"{prefix}{stem}.mqxc"


def file_crc32c(path: os.PathLike[str] | str, chunk: int = 8 << 20) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return crc
            crc = crc32c.crc32c(b, crc)


def uploaded_reader(store: object, body: dict[str, object]) -> CompactedIndexReader:
    """The reader of an uploaded file from its manifest: header and summary from the manifest, so
    opening costs no request and a query costs one ranged GET."""
    head = base64.b64decode(str(body["head"]))
    tail = base64.b64decode(str(body["tail"]))
    src = CachedSummarySource(store, str(body["key"]), int(body["size"]),  # type: ignore[call-overload]
                              head, int(body["tail_offset"]), tail)  # type: ignore[call-overload]
    return CompactedIndexReader(src, verify_blocks=False)


def manifest_body(path: os.PathLike[str] | str, stem: str, key: str, size: int, crc: int, begin_ms: int,
                  min_ms: int | None, max_ms: int | None, items: int) -> dict[str, object]:
    """The manifest of an uploaded compacted file: where it is, its checksum, and its header and summary (so it
    opens with no request)."""
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
        header = CompactedHeader.parse(str(path), head)
        f.seek(header.summary_offset)
        tail = f.read()
    return {"stem": stem, "key": key, "size": size, "crc32c": crc, "begin_ms": begin_ms, "min_ms": min_ms,
            "max_ms": max_ms, "items": items, "format": "native-compacted", "head": base64.b64encode(head).decode(),
            "tail_offset": header.summary_offset, "tail": base64.b64encode(tail).decode()}


@dataclass
class Lifecycle:
    folders: StateFolders
    files: FileMap
    config: ServiceConfig
    store: object | None
    filters: FilterCache | None = None
    _compacting: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def hook(self, point: str) -> None:
        if self.config.crash_hook is not None:
            self.config.crash_hook(point)

    # -- SEALED -> COMPACTED ---------------------------------------------------------------------
    def compact(self, mf: ManagedFile) -> None:
        """Compact a SEALED file; a file no longer SEALED (compacted meanwhile) is left as it is. Compactions run
        one at a time: `IndexService.compact_now` (an admin's roll) and the background cycle can both come to the
        file an age roll just sealed, and the second must find it done, not its source gone."""
        with self._compacting:
            if mf.state is not FileState.SEALED:
                log.info("compaction skipped: already done", extra={"file": mf.stem, "state": mf.state.value})
                return
            self._compact(mf)

    def _compact(self, mf: ManagedFile) -> None:
        src = self.folders.unsealed(mf.stem)
        scratch = self.folders.scratch(mf.stem + ".mqxc")
        dest = self.folders.compacted(mf.stem)
        started = time.perf_counter()
        log.info("compacting", extra={"file": mf.stem, "state": mf.state.value, "items": mf.items})
        stats = compact(src, scratch)  # verified source; written to scratch.tmp, fsynced, renamed
        self.hook("compact:scratch-written")
        self.folders.publish(scratch, dest)
        self.hook("compact:published")
        reader = CompactedIndexReader(str(dest))  # verifies every block CRC32C of the new form
        try:
            write_local_filter(self.folders, local_filter_path(self.folders, mf.stem, FileState.COMPACTED),
                               filter_for_compacted(reader))
        except BaseException:
            reader.close()
            raise
        mf.size_bytes = stats.bytes
        mf.swap(FileState.COMPACTED, reader, str(dest))
        self._forget_filter(mf)
        self.folders.remove(src)
        self.hook("compact:done")
        log.info("compacted", extra={"file": mf.stem, "state": "COMPACTED", "items": stats.items,
                                     "duplicates_dropped": stats.duplicates_dropped, "bytes": stats.bytes,
                                     "seconds": round(time.perf_counter() - started, 4)})

    # -- COMPACTED -> UPLOADED -------------------------------------------------------------------
    def upload(self, mf: ManagedFile) -> None:
        store = self.store
        assert store is not None
        path = self.folders.compacted(mf.stem)
        key = remote_key(mf.stem, self.config.remote_prefix)
        size = path.stat().st_size
        started = time.perf_counter()
        log.info("uploading", extra={"file": mf.stem, "state": mf.state.value, "key": key, "bytes": size})
        size, crc = self.put_file(path, key)
        self.hook("upload:put-done")
        self.verify_remote(key, size, crc)
        self.hook("upload:verified")
        filter_data = self._filter_of_compacted(mf)
        store.put(filter_key(key), filter_data)  # type: ignore[attr-defined]
        write_local_filter(self.folders, local_filter_path(self.folders, mf.stem, FileState.UPLOADED), filter_data)
        self.hook("upload:filter-written")
        body = manifest_body(path, mf.stem, key, size, crc, mf.begin_ms, mf.min_ms, mf.max_ms, mf.items)
        self.folders.write_document(self.folders.manifest(mf.stem), body)
        self.hook("upload:manifest-written")
        reader = uploaded_reader(store, body)
        mf.remote_key = key
        mf.size_bytes = size
        mf.swap(FileState.UPLOADED, reader, key)
        self._forget_filter(mf)
        self.folders.remove(path)
        self.folders.remove(local_filter_path(self.folders, mf.stem, FileState.COMPACTED))
        self.hook("upload:done")
        log.info("uploaded", extra={"file": mf.stem, "state": "UPLOADED", "key": key, "bytes": size,
                                    "seconds": round(time.perf_counter() - started, 4)})

    def put_file(self, path: os.PathLike[str] | str, key: str) -> tuple[int, int]:
        """Put a local file at `key` (in parts above upload_part_bytes); its (size, CRC32C)."""
        store = self.store
        assert store is not None
        return put_file(store, path, key, self.config.upload_part_bytes)  # type: ignore[arg-type]

    def _filter_of_compacted(self, mf: ManagedFile) -> bytes:
        """The key filter kept beside the compacted file; built again from the file when it is missing or
        fails its checks (a crash between compaction and the filter's write, a damaged disk)."""
        path = local_filter_path(self.folders, mf.stem, FileState.COMPACTED)
        try:
            data = path.read_bytes()
            verify_filter(data, str(path))
            return data
        except (OSError, FormatError) as exc:
            log.warning("key filter rebuilt from the compacted file", extra={"file": mf.stem, "path": str(path),
                                                                              "error": str(exc)})
        with CompactedIndexReader(str(self.folders.compacted(mf.stem))) as reader:
            return filter_for_compacted(reader)

    def _forget_filter(self, mf: ManagedFile) -> None:
        if self.filters is not None:
            self.filters.forget(mf.stem)

    def verify_remote(self, key: str, size: int, crc: int) -> None:
        """Size (HEAD) and CRC32C of the object as the store returns it, read back in parts."""
        store = self.store
        remote_size = store.size(key)  # type: ignore[union-attr]
        if remote_size != size:
            raise UploadVerifyError(f"{key}: stored {remote_size} bytes, local file has {size}")
        part = self.config.upload_part_bytes
        got = stored_crc(store, key, size, part)  # type: ignore[arg-type]
        if got != crc:
            raise UploadVerifyError(f"{key}: CRC32C {got:#x} read back, local file has {crc:#x}")

    # -- any state -> EXPIRED --------------------------------------------------------------------
    def expire(self, mf: ManagedFile) -> None:
        state = mf.state
        self.files.remove(mf)  # new queries no longer see it
        mf.retire()  # waits for queries in flight, closes the form
        if state is FileState.UPLOADED:
            key = mf.remote_key or remote_key(mf.stem, self.config.remote_prefix)
            self.folders.remove(self.folders.manifest(mf.stem))
            self.hook("expire:manifest-removed")
            if self.store is not None:
                # a merged file's inputs still waiting for their grace go with it (nothing reads them any more)
                keys = [key, *(k for _s, k in mf.replaces)]
                self.store.delete([x for k in keys for x in (k, filter_key(k))])  # type: ignore[attr-defined]
        self._forget_filter(mf)
        for st in (FileState.UPLOADED, FileState.COMPACTED):
            self.folders.remove(local_filter_path(self.folders, mf.stem, st))
        self.folders.remove(self.folders.compacted(mf.stem))
        self.folders.remove(self.folders.unsealed(mf.stem))
        ranges.remove(self.folders, mf.stem)
        self.hook("expire:done")
        log.info("expired", extra={"file": mf.stem, "state": "EXPIRED", "was": state.value, "newest_ms": mf.max_ms})
