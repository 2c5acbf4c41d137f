"""Crash recovery on open: rebuild the file map from the state folders.

Order:
1. clear compacting/ (half-written outputs of interrupted transitions and merges);
2. uploaded/: every manifest's checksum; its reader is built from the manifest (no request); a merged file's
   manifest names the files it replaced: theirs are removed and they are not served (merging.py);
3. compacted/: every file verified whole (magic, header, each block's CRC32C, summary, footer);
   one whose manifest exists is a finished upload whose local copy was not yet removed -> removed;
4. writing/: every unsealed file reopened by NativeIndexWriter.open, which recounts the items from
   their content and clears a torn tail; a sealed one whose compacted or uploaded form exists is a
   finished compaction -> removed; the newest unsealed one is the WRITING file, any older unsealed
   one is sealed (it was being rolled). After a power failure the file's newest checkpoint may count
   items whose pages never reached the disk: the file goes back to what verifies, never below what
   the service checkpoint says was synced (`synced_items`: that checkpoint's item count for the file
   it names, all of an older one, nothing of a newer one), so everything cut is beyond the service
   checkpoint and re-dispatched by the broker; a file whose synced part does not verify is quarantined;
5. imported/: RocketMQ registrations (see rocketmq_import.py);
6. the tail of the WRITING file beyond the checkpoint (read before 4: the dedup set for re-dispatch), with what
   the checkpoint carries of the tail an earlier recovery found and the re-dispatch had not consumed yet.

A file failing a check is moved to quarantine/ with an error log line naming it and the check; a file (or
document) of a version newer than this version reads is not damage: it is left in place and recovery stops
with `NewerFormat` (`NewerDocument`) naming it and both versions.
Interrupted compactions and uploads resume on the background thread (SEALED and COMPACTED files
are simply picked up again). Progress is logged per folder.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from index_file import CompactedIndexReader, FormatError, NativeIndexWriter
from index_file.errors import NewerFormat
from index_file.key_filter import FILTER_SUFFIX
from index_service import ranges
from index_service.checkpoint import CheckpointStore
from index_service.config import ServiceConfig
from index_service.file_map import FileMap
from index_service.key_filters import local_filter_path
from index_service.lifecycle import uploaded_reader
from index_service.managed_file import ManagedFile
from index_service.merging import unlist_input
from index_service.model import FileState
from index_service.rocketmq_import import load_imported
from index_service.state_folders import (
    COMPACTED,
    COMPACTED_EXT,
    MANIFEST_EXT,
    UNSEALED_EXT,
    UPLOADED,
    WRITING,
    DocumentError,
    StateFolders,
    parse_name,
)
from index_service.writer import TailKey

log = logging.getLogger("mqindex.index_service.recovery")


@dataclass
class RecoveryReport:
    scratch_cleared: int = 0
    uploaded: int = 0
    compacted: int = 0
    sealed: int = 0
    writing: str | None = None
    recovered_items: int = 0  # items found beyond the WRITING file's last checkpoint
    torn_items: int = 0  # items of a torn tail cleared
    rolled_back_items: int = 0  # items a WRITING file's checkpoint counted that were lost before a sync, cut
    tail_items: int = 0  # items beyond the service checkpoint (dedup set)
    carried_tail: int = 0  # entries of an earlier recovery's dedup set the checkpoint carried (not re-sent yet)
    tail_files: list[str] = field(default_factory=list)  # files holding those items
    finished_transitions: int = 0  # local forms removed because the next state was durable
    imported: int = 0
    quarantined: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _progress(folder: str, done: int, total: int) -> None:
    if total and (done == total or done % 50 == 0):
        log.info("recovery progress", extra={"folder": folder, "done": done, "total": total})


def _synced_items(stem: str, named: str | None, named_items: int, named_begin: int | None) -> int | None:
    """How many items of the unsealed file `stem` are known synced, so recovery must keep them: the service
    checkpoint's count for the file it names; None (all its own checkpoint counts) for an older one (the roll
    synced it and saved a checkpoint covering it before sealing it); none of a newer one (nothing of it is in
    the checkpoint: the broker re-dispatches all of it)."""
    if stem == named:
        return named_items
    begin = parse_name(stem)
    if named_begin is not None and begin is not None and begin < named_begin:
        return None
    return 0


def recover(folders: StateFolders, files: FileMap, config: ServiceConfig, store: object | None,
            checkpoints: CheckpointStore) -> tuple[RecoveryReport, ManagedFile | None, set[TailKey]]:
    started = time.perf_counter()
    rep = RecoveryReport()
    rep.scratch_cleared = folders.clear_scratch()
    log.info("recovery started", extra={"data_dir": str(folders.root), "scratch_cleared": rep.scratch_cleared})

    def quarantine(path: Path, reason: str, state: str) -> None:
        folders.quarantine(path, reason, state)
        rep.quarantined.append(path.name)

    # 2. uploaded manifests; a merged file's manifest names the inputs it replaced: they are not served
    manifests = folders.listing(UPLOADED, MANIFEST_EXT)
    uploaded: set[str] = set()
    bodies: list[tuple[Path, str, dict[str, object]]] = []
    for p in manifests:
        try:
            bodies.append((p, p.name[: -len(MANIFEST_EXT)], folders.read_document(p)))
        except DocumentError as exc:
            quarantine(p, str(exc), "UPLOADED")
    merged_away = {str(r[0]) for _p, _s, b in bodies for r in b.get("replaces") or ()}  # type: ignore[attr-defined]
    for i, (p, stem, body) in enumerate(bodies, 1):
        if stem in merged_away:
            unlist_input(folders, stem)  # the merge committed; only the removal of its inputs was missed
            rep.finished_transitions += 1
            continue
        try:
            if store is None:
                raise DocumentError(f"{p}: uploaded file but the service has no store configured")
            reader = uploaded_reader(store, body)
            mf = ManagedFile(stem, int(body["begin_ms"]), FileState.UPLOADED, reader, str(body["key"]),
                             sort_tag=str(body.get("sort_tag", "")))  # set by external builds and merges
            mf.remote_key = str(body["key"])
            mf.size_bytes = int(body["size"])  # type: ignore[call-overload]
            mf.tier = int(body.get("tier", 0))  # type: ignore[call-overload]
            mf.replaces = [(str(s), str(k)) for s, k in body.get("replaces") or ()]  # type: ignore[attr-defined]
            mf.committed_ms = int(body.get("committed_ms", 0))  # type: ignore[call-overload]
            files.add(mf)
            uploaded.add(stem)
            rep.uploaded += 1
        except NewerFormat:
            raise  # not damage: the file stays where it is and the service does not open
        except (DocumentError, FormatError, KeyError, ValueError, TypeError) as exc:
            if store is None and isinstance(exc, DocumentError) and "no store" in str(exc):
                raise RuntimeError(f"{p} describes an uploaded index file; open the service with its store") from exc
            quarantine(p, str(exc), "UPLOADED")
        _progress(UPLOADED, i, len(bodies))

    # 3. compacted files
    compacted: set[str] = set()
    paths = folders.listing(COMPACTED, COMPACTED_EXT)
    for i, p in enumerate(paths, 1):
        stem = p.name[: -len(COMPACTED_EXT)]
        if stem in uploaded:
            folders.remove(p)  # the upload was verified and recorded; only the local delete was missed
            folders.remove(local_filter_path(folders, stem, FileState.COMPACTED))
            rep.finished_transitions += 1
            continue
        try:
            reader = CompactedIndexReader(str(p))  # verifies every block
            mf = ManagedFile(stem, reader.begin_ms, FileState.COMPACTED, reader, str(p))
            mf.size_bytes = p.stat().st_size
            files.add(mf)
            compacted.add(stem)
            rep.compacted += 1
        except NewerFormat:
            raise
        except (FormatError, OSError, ValueError) as exc:
            quarantine(p, str(exc), "COMPACTED")
        _progress(COMPACTED, i, len(paths))

    # 4. writing folder; the checkpoint says how much of which file was synced
    ck = checkpoints.load()
    named_begin = parse_name(ck.writing) if ck.writing else None
    paths = folders.listing(WRITING, UNSEALED_EXT)
    unsealed: list[ManagedFile] = []
    for i, p in enumerate(paths, 1):
        stem = p.name[: -len(UNSEALED_EXT)]
        if stem in uploaded or stem in compacted:
            folders.remove(p)  # compaction finished (its output verified above)
            rep.finished_transitions += 1
            continue
        if parse_name(stem) is None:
            quarantine(p, "not an index file name", "WRITING")
            continue
        try:
            w = NativeIndexWriter.open(p, synced_items=_synced_items(stem, ck.writing, ck.items, named_begin))
        except NewerFormat:
            raise
        except (FormatError, OSError, ValueError) as exc:
            quarantine(p, str(exc), "WRITING")
            continue
        rep.recovered_items += w.recovered_items
        rep.torn_items += w.torn_items
        rep.rolled_back_items += w.rolled_back_items
        if w.recovered_items or w.torn_items or w.rolled_back_items:
            log.warning("writing file recovered from content",
                        extra={"file": stem, "state": "WRITING", "items": w.item_count,
                               "recovered_items": w.recovered_items, "torn_items": w.torn_items,
                               "rolled_back_items": w.rolled_back_items})
        state = FileState.SEALED if w.sealed else FileState.WRITING
        mf = ManagedFile(stem, w.begin_ms, state, w, str(p))
        mf.size_bytes = p.stat().st_size
        files.add(mf)
        if w.sealed:
            rep.sealed += 1
        else:
            unsealed.append(mf)
        _progress(WRITING, i, len(paths))
    current: ManagedFile | None = None
    for mf in sorted(unsealed, key=lambda m: m.begin_ms):
        if current is not None:  # an older unsealed file: it was being rolled when the process died
            current.form.seal()
            current.state = FileState.SEALED
            rep.sealed += 1
        current = mf
    rep.writing = current.stem if current is not None else None

    # 5. RocketMQ registrations
    rep.imported = load_imported(folders, files)

    # 6. the tail beyond the checkpoint, and what the checkpoint carries of an earlier one
    tail: set[TailKey] = set(ck.tail)
    rep.carried_tail = len(ck.tail)
    live_stems = {mf.stem for mf in files.files()}
    rep.tail_files.extend(s for s in ck.tail_files if s in live_stems)
    for mf in files.by_state(FileState.WRITING, FileState.SEALED):
        if named_begin is not None and mf.begin_ms < named_begin:
            continue
        start = ck.items if mf.stem == ck.writing else 0
        if mf.form.item_count > start:
            items = mf.form.items()[start:]
            tail.update(zip(items["fp"].tolist(), items["queue"].tolist(), items["offset"].tolist(), strict=True))
            rep.tail_items += len(items)
        if mf.form.item_count > start and mf.stem not in rep.tail_files:
            rep.tail_files.append(mf.stem)
    # 7. offset ranges: saved at seal; the checkpoint holds the WRITING file's
    for mf in files.files():
        if mf.state in (FileState.IMPORTED,):
            continue
        saved = ranges.load(folders, mf.stem)
        if saved is not None:
            mf.ranges = saved
        elif mf.stem == ck.writing:
            mf.ranges = dict(ck.ranges)
        elif mf.state in (FileState.WRITING, FileState.SEALED) and (
                mf.stem in rep.tail_files or mf.form.item_count == 0):
            mf.ranges = {}  # every item is beyond the checkpoint: the re-dispatch fills the ranges
    # 8. what a merge killed before its commit left locally: its filter beside no manifest, its ranges
    live = {mf.stem for mf in files.files()}
    for p in folders.listing(UPLOADED, FILTER_SUFFIX):
        if p.name[: -len(FILTER_SUFFIX)] not in live:
            folders.remove(p)
    for p in sorted((folders.root / ranges.RANGES).glob("*-t*-*.json")):
        if p.name[: -len(".json")] not in live:
            folders.remove(p)
    rep.seconds = time.perf_counter() - started
    log.info("recovery finished", extra={k: v for k, v in rep.__dict__.items()})
    return rep, current, tail
