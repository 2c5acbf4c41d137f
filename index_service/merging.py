"""Index files merged over time, in tiers, so a lookup over months of history asks a few dozen files.

Tiers (ServiceConfig.merge_tiers_ms, default one UTC day, then one week): an UPLOADED file belongs to the window
`newest store time // span` of each tier. Once a window of tier n has ended `merge_settle_ms` ago and holds at
least `merge_min_files` files of tiers below n (with the tier-n file already made of it, if any: a file rolled
late into the window joins it), those files are merged into one file of tier n: hourly files into a day file,
day files (and hourly files of a closed week not yet merged) into a week file. One merge takes at most
`merge_max_inputs` files and `merge_max_items` items; a window with more is merged over several cycles. Files
of the current day stay as written. A tier whose span is not below the index retention is not used (its files
would expire about as soon as they were merged). Files built outside the service (Spark) are not merged.

A merge, on the background thread (crash points for the tests in brackets):
1. prepare: the inputs are streamed (index_file/merge.py, memory bounded by merge_window_bytes plus 8 B per
   distinct key for the filter) into compacting/<stem>.mqxc [merge:scratch-written]; the file is put in the
   store and read back (size and CRC32C) [merge:uploaded]; its key filter is put beside it and written to
   uploaded/<stem>.filter [merge:filter-written]; its offset ranges (the union of the inputs') are saved;
2. commit: ONE atomic write, the merged file's manifest in uploaded/, naming the inputs it replaces and when
   [merge:committed]; then the file map swaps the inputs for it in one step under its lock [merge:swapped];
   the inputs' manifests, local filters and ranges are removed [merge:done];
3. delete after the grace: `merge_grace_ms` after the commit (service clock) the inputs' objects and filters are
   deleted from the store [merge:inputs-deleted] and the manifest is rewritten without them [merge:released].
   Until then queries that took the inputs before the swap still read them, and the orphan sweep keeps them.

Recovery (recovery.py): a manifest that names inputs wins over theirs (their manifests, filters and ranges are
removed, they are not served); without it the inputs serve and the merged object, if put, is an orphan the
first cycle deletes. So after a crash at any step the index answers as before, each entry once.

Retention: a merged file expires when its newest entry does; until then the entries of its older inputs are
skipped at read time (IndexService.query never asks for entries older than now - retention_ms), so an entry
stops being found at its time without rewriting the file.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from index_file.key_filter import encode_filter
from index_file.merge import merge_compacted
from index_service import ranges
from index_service.config import ServiceConfig
from index_service.file_map import FileMap
from index_service.key_filters import filter_key, local_filter_path, write_local_filter
from index_service.lifecycle import Lifecycle, manifest_body, remote_key, uploaded_reader
from index_service.managed_file import ManagedFile
from index_service.model import FileState
from index_service.state_folders import StateFolders

log = logging.getLogger("mqindex.index_service.merging")

#: put beside an uploaded file's object by a merge outside this service (a departed node's files merged by the
#: cluster) before it deletes the object: the service that owned the file drops it at its next orphan sweep
MERGED_AWAY_SUFFIX = ".merged"


@dataclass
class MergeReport:
    merged: list[str] = field(default_factory=list)  # merged files made
    released: list[str] = field(default_factory=list)  # merged files whose inputs were deleted after the grace
    failed: list[str] = field(default_factory=list)


@dataclass
class MergeStats:
    """Totals since the service opened (exported on /metrics)."""

    merges: int = 0
    bytes_written: int = 0
    files_merged: int = 0
    backlog: int = 0  # files waiting in closed windows, as of the last cycle


def _mergeable(mf: ManagedFile) -> bool:
    return (mf.state is FileState.UPLOADED and mf.exact and not mf.replaces and mf.max_ms is not None
            and (mf.tier > 0 or not mf.sort_tag))


def plan(files: list[ManagedFile], config: ServiceConfig, now: int) -> list[tuple[int, list[ManagedFile]]]:
    """(tier, inputs) of every merge due now, inputs oldest first; no file is in two merges."""
    out: list[tuple[int, list[ManagedFile]]] = []
    used: set[str] = set()
    retention = config.retention_ms
    cutoff = None if retention is None else now - retention
    for tier, span in enumerate(config.merge_tiers_ms, 1):
        if retention is not None and span >= retention:
            continue
        windows: dict[int, list[ManagedFile]] = defaultdict(list)
        for mf in files:
            if mf.stem in used or not _mergeable(mf) or mf.tier > tier:
                continue
            newest = int(mf.max_ms)  # type: ignore[arg-type]
            w = newest // span
            if (w + 1) * span + config.merge_settle_ms > now or (cutoff is not None and newest < cutoff):
                continue  # the window is still open, or the file expires anyway
            windows[w].append(mf)
        for w in sorted(windows):
            mfs = sorted(windows[w], key=lambda m: (m.min_ms or 0, m.begin_ms, m.stem))
            if len(mfs) < config.merge_min_files or all(m.tier == tier for m in mfs):
                continue
            batch: list[ManagedFile] = []
            items = 0
            for m in mfs:
                if len(batch) >= config.merge_max_inputs or (batch and items + m.items > config.merge_max_items):
                    break
                batch.append(m)
                items += m.items
            if len(batch) >= 2:
                out.append((tier, batch))
                used.update(m.stem for m in batch)
    return out


def union_ranges(inputs: list[ManagedFile]) -> ranges.Ranges | None:
    out: ranges.Ranges = {}
    for mf in inputs:
        if mf.ranges is None:
            return None  # one input's ranges are unknown: so are the merged file's
        for k, (lo, hi) in mf.ranges.items():
            cur = out.get(k)
            out[k] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
    return out


class Merger:
    def __init__(self, folders: StateFolders, files: FileMap, lifecycle: Lifecycle) -> None:
        self.folders = folders
        self.files = files
        self.lifecycle = lifecycle
        self.config = lifecycle.config
        self.stats = MergeStats()
        #: inputs swapped out in this process, closed once their grace has passed
        self._retired: dict[str, list[ManagedFile]] = {}

    def run(self, rep: MergeReport, stop: object = None) -> None:
        """Release what is due, then make every merge due now."""
        if self.lifecycle.store is None:
            return
        now = self.config.clock()
        self.release_due(rep, now)
        if not self.config.merge_tiers_ms:
            return
        due = plan(self.files.files(), self.config, now)
        self.stats.backlog = sum(len(b) for _t, b in due)
        for tier, inputs in due:
            if stop is not None and stop.is_set():  # type: ignore[attr-defined]
                return
            try:
                rep.merged.append(self.merge(tier, inputs))
            except Exception as exc:  # noqa: BLE001 - the inputs still serve; tried again next cycle
                log.warning("merge failed, retrying later", extra={
                    "tier": tier, "inputs": [m.stem for m in inputs], "error": f"{type(exc).__name__}: {exc}"})
                rep.failed.append(",".join(m.stem for m in inputs))

    def merge(self, tier: int, inputs: list[ManagedFile]) -> str:
        lc, folders, store = self.lifecycle, self.folders, self.lifecycle.store
        started = time.perf_counter()
        begin = min(m.begin_ms for m in inputs)
        stem = f"{begin:016d}-t{tier}-{uuid.uuid4().hex[:8]}"
        scratch = folders.scratch(stem + ".mqxc")
        key = remote_key(stem, self.config.remote_prefix)
        log.info("merging", extra={"file": stem, "tier": tier, "inputs": [m.stem for m in inputs],
                                   "items": sum(m.items for m in inputs)})
        st = merge_compacted([m.form for m in inputs], scratch, self.config.merge_window_bytes)
        lc.hook("merge:scratch-written")
        size, crc = lc.put_file(scratch, key)
        lc.verify_remote(key, size, crc)
        lc.hook("merge:uploaded")
        filt = encode_filter(st.fingerprints)
        store.put(filter_key(key), filt)  # type: ignore[union-attr]
        write_local_filter(folders, local_filter_path(folders, stem, FileState.UPLOADED), filt)
        lc.hook("merge:filter-written")
        union = union_ranges(inputs)
        if union is not None:
            ranges.save(folders, stem, union)
        now = self.config.clock()
        replaces = [(m.stem, m.remote_key or remote_key(m.stem, self.config.remote_prefix)) for m in inputs]
        body = manifest_body(scratch, stem, key, size, crc, begin, st.min_ms, st.max_ms, st.items)
        body.update({"tier": tier, "sort_tag": stem, "replaces": [list(r) for r in replaces], "committed_ms": now})
        folders.write_document(folders.manifest(stem), body)  # the commit
        lc.hook("merge:committed")
        mf = ManagedFile(stem, begin, FileState.UPLOADED, uploaded_reader(store, body), key, sort_tag=stem)
        mf.remote_key, mf.size_bytes, mf.tier, mf.ranges = key, size, tier, union
        mf.replaces, mf.committed_ms = replaces, now
        self.files.replace(inputs, mf)
        lc.hook("merge:swapped")
        for m in inputs:
            unlist_input(folders, m.stem)
            if lc.filters is not None:
                lc.filters.forget(m.stem)
        folders.remove(scratch)
        self._retired[stem] = list(inputs)
        self.stats.merges += 1
        self.stats.bytes_written += size
        self.stats.files_merged += len(inputs)
        lc.hook("merge:done")
        log.info("merged", extra={"file": stem, "tier": tier, "inputs": len(inputs), "items": st.items,
                                  "duplicates_dropped": st.duplicates_dropped, "bytes": size,
                                  "seconds": round(time.perf_counter() - started, 4)})
        return stem

    def release_due(self, rep: MergeReport, now: int) -> None:
        """Delete from the store the inputs of merges committed at least merge_grace_ms ago."""
        for mf in self.files.by_state(FileState.UPLOADED):
            if not mf.replaces or now < mf.committed_ms + self.config.merge_grace_ms:
                continue
            try:
                self.release(mf)
                rep.released.append(mf.stem)
            except Exception as exc:  # noqa: BLE001 - retried next cycle
                log.warning("deleting merged inputs failed, retrying later",
                            extra={"file": mf.stem, "error": f"{type(exc).__name__}: {exc}"})
                rep.failed.append(mf.stem)

    def release(self, mf: ManagedFile) -> None:
        for old in self._retired.pop(mf.stem, []):
            old.retire()  # waits for the queries still reading it
        keys = [x for _s, k in mf.replaces for x in (k, filter_key(k))]
        self.lifecycle.store.delete(keys)  # type: ignore[union-attr]
        self.lifecycle.hook("merge:inputs-deleted")
        path = self.folders.manifest(mf.stem)
        body = self.folders.read_document(path)
        body.pop("replaces", None)
        body.pop("committed_ms", None)
        self.folders.write_document(path, body)
        mf.replaces = []
        self.lifecycle.hook("merge:released")
        log.info("merged inputs deleted", extra={"file": mf.stem, "keys": keys})


def unlist_input(folders: StateFolders, stem: str) -> None:
    """Remove what serves a merged-away file locally: its manifest, filter and ranges (idempotent)."""
    folders.remove(folders.manifest(stem))
    folders.remove(local_filter_path(folders, stem, FileState.UPLOADED))
    ranges.remove(folders, stem)
