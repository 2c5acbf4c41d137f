"""RocketMQ tiered index files served read-only: registration and loading.

`register_directory` (the `mqindex import-rocketmq DIR` command) inspects every RocketMQ
IndexStoreFile in DIR (unsealed or compacted layout, detected by magic and size), reads its items
once to record the oldest and newest store time they stand for, and writes one manifest per file
into <data_dir>/imported/. By default a manifest references the file where it is (absolute path,
size and mtime recorded; the file is never written); with `copy=True` the file is first copied into
<data_dir>/imported/files/ (through the scratch folder) so the registration survives DIR being
removed. A running service picks new manifests up on its next maintenance cycle; a new one picks
them up on open.

Hits from these files are 32-bit-hash candidates (exact=False): the service runs them through its
verifier, or returns them marked inexact (see query.py).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from index_file import FormatError, RocketMQIndexReader
from index_file.rocketmq_format import DEFAULT_SLOTS, MAGIC_END, MAGIC_OPEN
from index_service.file_map import FileMap
from index_service.managed_file import ManagedFile
from index_service.model import FileState
from index_service.state_folders import IMPORTED, MANIFEST_EXT, DocumentError, StateFolders

log = logging.getLogger("mqindex.index_service.import")


@dataclass(frozen=True)
class Registered:
    name: str
    path: str
    layout: str
    items: int
    begin_ms: int
    min_ms: int | None
    max_ms: int | None


def _is_rocketmq(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and int.from_bytes(head, "big") in (MAGIC_OPEN, MAGIC_END)


def inspect_file(path: Path, slot_count: int | None) -> dict[str, object]:
    with RocketMQIndexReader(str(path), slot_count=slot_count) as r:
        items = r.iter_items()
        if len(items):
            diffs = items["time_diff"].astype(np.int64)
            min_ms = int(r.begin_ms + diffs.min() * 1000)
            max_ms = int(r.begin_ms + diffs.max() * 1000)
        else:
            min_ms = max_ms = None
        st = path.stat()
        return {"path": str(path.resolve()), "layout": r.layout, "slot_count": r.slot_count, "items": r.item_count,
                "begin_ms": r.begin_ms, "end_ms": r.end_ms, "min_ms": min_ms, "max_ms": max_ms,
                "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def register_directory(data_dir: str | os.PathLike[str], directory: str | os.PathLike[str],
                       slot_count: int | None = None, copy: bool = False) -> list[Registered]:
    """Register every RocketMQ index file in `directory` (not recursive). Files already registered
    (same name) are skipped. `slot_count` is needed for unsealed files that do not use RocketMQ's
    default 5,000,000 slots; compacted files carry theirs."""
    folders = StateFolders(data_dir)
    src_dir = Path(directory)
    if not src_dir.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory")
    files_dir = folders.root / IMPORTED / "files"
    out: list[Registered] = []
    for p in sorted(src_dir.iterdir()):
        if not p.is_file() or not _is_rocketmq(p):
            continue
        name = p.name
        manifest = folders.path(IMPORTED, f"rmq-{name}{MANIFEST_EXT}")
        if manifest.exists():
            log.info("already registered", extra={"file": name, "state": "IMPORTED"})
            continue
        slots = slot_count
        body = _inspect_with_default(p, slots)
        if copy:
            files_dir.mkdir(exist_ok=True)
            scratch = folders.scratch(f"import-{name}")
            shutil.copyfile(p, scratch)
            dest = files_dir / name
            folders.publish(scratch, dest)
            body = _inspect_with_default(dest, slots)
        body["name"] = name
        body["copied"] = copy
        folders.write_document(manifest, body)
        log.info("registered rocketmq index file", extra={"file": name, "state": "IMPORTED", "path": body["path"],
                                                          "layout": body["layout"], "items": body["items"]})
        out.append(Registered(name, str(body["path"]), str(body["layout"]), int(body["items"]),  # type: ignore[call-overload]
                              int(body["begin_ms"]), body["min_ms"], body["max_ms"]))  # type: ignore[call-overload,arg-type]
    return out


def _inspect_with_default(p: Path, slots: int | None) -> dict[str, object]:
    try:
        return inspect_file(p, slots)
    except FormatError:
        if slots is None:  # an unsealed file needs its slot count; try RocketMQ's default
            return inspect_file(p, DEFAULT_SLOTS)
        raise


def load_imported(folders: StateFolders, files: FileMap) -> int:
    """Add every registered RocketMQ file not yet in the map; returns how many were added. A
    registration whose file changed or vanished is logged and skipped (the user's file is never
    moved); an unreadable manifest is quarantined."""
    present = {mf.stem for mf in files.files() if mf.state is FileState.IMPORTED}
    added = 0
    for p in folders.listing(IMPORTED, MANIFEST_EXT):
        stem = p.name[: -len(MANIFEST_EXT)]
        if stem in present:
            continue
        try:
            body = folders.read_document(p)
        except DocumentError as exc:
            folders.quarantine(p, str(exc), "IMPORTED")
            continue
        path = Path(str(body["path"]))
        try:
            st = path.stat()
            if st.st_size != int(body["size"]):
                raise FormatError(str(path), "file size", f"{st.st_size} bytes, registered with {body['size']}")
            reader = RocketMQIndexReader(str(path), slot_count=int(body["slot_count"]), layout=str(body["layout"]))
        except (OSError, FormatError, ValueError) as exc:
            log.error("registered rocketmq index file unusable", extra={"file": str(path), "state": "IMPORTED",
                                                                         "reason": str(exc)})
            continue
        mf = ManagedFile(stem, int(body["begin_ms"]), FileState.IMPORTED, reader, str(path), exact=False,
                         sort_tag=stem)
        mf.min_ms = body["min_ms"]  # type: ignore[assignment]
        mf.max_ms = body["max_ms"]  # type: ignore[assignment]
        mf.items = int(body["items"])
        mf.size_bytes = int(body["size"])
        files.add(mf)
        added += 1
    return added
