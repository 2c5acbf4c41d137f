"""Step 4 (Spark job 2, executors): one file range written, sealed, compacted, uploaded (verified), its key filter
put beside it (`<key>.filter`, index_file/key_filter.py, built from the items' fingerprints already in memory, so
the service adopting the build need not read the file back to make one), and described by its manifest."""

from __future__ import annotations

import base64
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from index_file import NativeIndexWriter, compact
from index_file.key_filter import FILTER_SUFFIX, encode_filter
from index_file.native_compacted import HEADER_SIZE, CompactedHeader
from jobs import index_items
from jobs.spark_build.extract import ExecutorParams, _store
from jobs.spark_build.options import BUILD_PREFIX, build_key, build_stem
from storage_tier import BlobStore
from storage_tier.file_upload import put_file, stored_crc


def _manifest(path: Path, key: str, stem: str, crc: int, size: int, items: int, begin_ms: int) -> dict[str, Any]:
    """The UPLOADED manifest of a compacted file (the same fields lifecycle.upload writes)."""
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
        header = CompactedHeader.parse(str(path), head)
        f.seek(header.summary_offset)
        tail = f.read()
    return {"stem": stem, "key": key, "size": size, "crc32c": crc, "begin_ms": begin_ms,
            "min_ms": header.min_ms, "max_ms": header.max_ms, "items": items,
            "format": "native-compacted", "head": base64.b64encode(head).decode(),
            "tail_offset": header.summary_offset, "tail": base64.b64encode(tail).decode(), "sort_tag": stem}


def abort_marker(name: str, attempt: str) -> str:
    """Written by a driver whose build failed, before it deletes the attempt's objects; an executor that
    finds it after an upload deletes what it uploaded, so no object outlives a failed attempt."""
    return f"{BUILD_PREFIX}{name}/{attempt}/ABORTED"


class AttemptAborted(RuntimeError):
    pass


def _upload(store: BlobStore, path: Path, key: str, part: int, marker: str) -> tuple[int, int]:
    """Put (multipart above `part` bytes), verify size and CRC32C read back; returns (size, crc).
    If the driver aborted the attempt meanwhile (marker present), delete the object and stop."""
    if store.exists(marker):
        raise AttemptAborted(f"build attempt aborted; {key} not uploaded")
    size, crc = put_file(store, path, key, part)
    if store.exists(marker):  # the driver may have listed the attempt before this put: clean up ourselves
        store.delete(key)
        raise AttemptAborted(f"build attempt aborted; {key} deleted")
    remote = store.size(key)
    if remote != size:
        raise OSError(f"{key}: stored {remote} bytes, built {size}")
    got = stored_crc(store, key, size, part)
    if got != crc:
        raise OSError(f"{key}: CRC32C {got:#x} read back, built {crc:#x}")
    return size, crc


def put_filter(store: BlobStore, key: str, fps: np.ndarray, marker: str) -> None:
    """Put the key filter of the uploaded file `key` beside it (`<key>.filter`, the name the service adopts), and
    delete it again if the driver aborted the attempt meanwhile (as _upload does for the file)."""
    fkey = key + FILTER_SUFFIX
    store.put(fkey, encode_filter(fps))
    if store.exists(marker):
        store.delete([fkey, key])
        raise AttemptAborted(f"build attempt aborted; {fkey} deleted")


def build_window_files(params: ExecutorParams, window_index: int, items: np.ndarray,
                       on_file: Callable[[], None] | None = None) -> list[dict[str, Any]]:
    """Executor: write, seal, compact and upload the files of one file range; returns their manifests."""
    rows = index_items.sort_dedup(items)
    firsts = np.flatnonzero(index_items.record_starts(rows))
    counts = np.diff(np.append(firsts, len(rows)))
    try:
        cuts = index_items.file_cuts(counts, params.max_items)
    except ValueError:
        i = int(firsts[int(np.argmax(counts > params.max_items))])
        raise ValueError(f"record {int(rows['partition'][i])}@{int(rows['offset'][i])} has more keys than a file "
                         f"holds ({params.max_items})") from None
    bounds = [int(firsts[c]) for c in cuts] + [len(rows)]
    store = _store(params.index_store_url)
    out: list[dict[str, Any]] = []
    for seq, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        if hi <= lo:
            continue
        chunk = index_items.native_items(rows[lo:hi])
        begin = int(chunk["time"][0])
        stem = build_stem(begin, params.name, params.attempt, seq)
        key = build_key(params.name, params.attempt, stem)
        tmp = Path(tempfile.mkdtemp(prefix="mqindex-spark-"))
        try:
            n_items = len(chunk)
            src, dst = tmp / f"{stem}.mqxu", tmp / f"{stem}.mqxc"
            w = NativeIndexWriter.create(src, begin, params.slots, n_items)
            try:
                done = w.put_items(chunk)
                if done != n_items:
                    raise RuntimeError(f"{stem}: {done} of {n_items} items fit in a file of {n_items} items")
                w.seal()
            finally:
                w.close()
            stats = compact(src, dst)
            src.unlink()
            size, crc = _upload(store, dst, key, params.part_bytes, abort_marker(params.name, params.attempt))
            put_filter(store, key, chunk["fp"], abort_marker(params.name, params.attempt))
            out.append(_manifest(dst, key, stem, crc, size, stats.items, begin))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if on_file is not None:
            on_file()
        if params.fault_window == window_index:
            raise RuntimeError(f"injected executor fault after uploading {key}")
    return out
