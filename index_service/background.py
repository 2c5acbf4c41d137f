"""The background thread: rolls an aged WRITING file, compacts SEALED files, uploads COMPACTED
ones, merges old uploaded files into tiers (merging.py) and deletes merged inputs after their grace,
expires files past retention, sweeps store objects no manifest claims, and picks up new
RocketMQ registrations; on a schedule (`maintain_interval_s`, and as soon as a file is sealed) and on demand
(`maintain()`); with `maintain_interval_s=0` only on demand.

A failing step (S3 down, a disk error) is logged with the file and state, and the file is retried
after a backoff that doubles up to `retry_max_s`; writes are never blocked and the file stays
queryable in its current form. A source that fails its checks during compaction is quarantined.
One cycle runs at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from index_file import FormatError
from index_file.key_filter import FILTER_SUFFIX
from index_service import ranges
from index_service.config import ServiceConfig
from index_service.external_builds import adopt_builds
from index_service.file_map import FileMap
from index_service.lifecycle import Lifecycle
from index_service.managed_file import ManagedFile
from index_service.merging import MERGED_AWAY_SUFFIX, Merger, MergeReport, unlist_input
from index_service.model import FileState
from index_service.rocketmq_import import load_imported
from index_service.state_folders import COMPACTED_EXT, StateFolders

log = logging.getLogger("mqindex.index_service.background")


@dataclass
class CycleReport:
    rolled: bool = False
    compacted: list[str] = field(default_factory=list)
    uploaded: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)
    imported: int = 0
    adopted: list[str] = field(default_factory=list)  # external builds now served
    merged: list[str] = field(default_factory=list)  # merged files made (merging.py)
    released: list[str] = field(default_factory=list)  # merged files whose inputs were deleted after the grace


class Background:
    def __init__(self, config: ServiceConfig, folders: StateFolders, files: FileMap, lifecycle: Lifecycle,
                 request_roll: Callable[[], bool]) -> None:
        self.config = config
        self.folders = folders
        self.files = files
        self.lifecycle = lifecycle
        self.request_roll = request_roll
        self._cycle_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._swept = False
        self.merger = Merger(folders, files, lifecycle)
        self._thread: threading.Thread | None = None
        #: cycles the background thread has finished (failed ones included); tests wait on it to know that
        #: cycles ran, rather than sleeping for an interval
        self.runs = 0

    def start(self) -> None:
        if self.config.maintain_interval_s <= 0:
            return  # on demand only (maintain()): deterministic for tests
        self._thread = threading.Thread(target=self._run, name="mqindex-background", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        interval = self.config.maintain_interval_s
        while not self._stop.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.cycle(ignore_backoff=False)
            except Exception:  # noqa: BLE001 - the thread must survive; every step logs its own failure
                log.exception("maintenance cycle failed")
            finally:
                self.runs += 1

    def cycle(self, ignore_backoff: bool = True) -> CycleReport:
        with self._cycle_lock:
            rep = CycleReport()
            now = time.monotonic()

            def due(mf: ManagedFile) -> bool:
                return ignore_backoff or mf.next_attempt <= now

            rep.rolled = self.request_roll()
            expired = self._expire(rep)
            for mf in self.files.by_state(FileState.SEALED):
                if due(mf) and mf not in expired and not self._stop.is_set():
                    self._step(mf, "compact", rep.compacted, rep)
            if self.lifecycle.store is not None:
                if not self._swept:
                    self._sweep_orphans(rep)
                for mf in self.files.by_state(FileState.COMPACTED):
                    if due(mf) and not self._stop.is_set():
                        self._step(mf, "upload", rep.uploaded, rep)
                if not self._stop.is_set():
                    mrep = MergeReport()
                    self.merger.run(mrep, self._stop)
                    rep.merged, rep.released = mrep.merged, mrep.released
                    rep.failed.extend(mrep.failed)
            rep.imported = load_imported(self.folders, self.files)
            rep.adopted = adopt_builds(self.folders, self.files, self.lifecycle).builds
            return rep

    def _step(self, mf: ManagedFile, what: str, done: list[str], rep: CycleReport) -> None:
        try:
            getattr(self.lifecycle, what)(mf)
            mf.succeeded()
            done.append(mf.stem)
        except FormatError as exc:
            if what == "compact":  # the sealed source fails its checksums: never serve it
                self.files.remove(mf)
                mf.retire()
                self.folders.quarantine(self.folders.unsealed(mf.stem), str(exc), mf.state.value)
            rep.failed.append(mf.stem)
        except Exception as exc:  # noqa: BLE001 - retried later
            delay = mf.backoff(self.config.retry_initial_s, self.config.retry_max_s)
            log.warning(f"{what} failed, retrying later", extra={"file": mf.stem, "state": mf.state.value,
                                                                 "error": f"{type(exc).__name__}: {exc}",
                                                                 "retry_in_s": delay, "failures": mf.failures})
            rep.failed.append(mf.stem)

    def _expired(self, mf: ManagedFile, cutoff: int | None) -> str | None:
        """Why `mf` is expired now, or None: every offset range in it trimmed by the broker (the index
        follows the data), or older than the explicit index-only retention."""
        is_live = self.config.is_live
        if is_live is not None and ranges.all_trimmed(mf.ranges, is_live):
            return "data trimmed"
        if cutoff is not None:
            bounds = mf.time_bounds()
            newest = bounds[1] if bounds is not None else mf.begin_ms
            if newest < cutoff:
                return "index retention"
        return None

    def _expire(self, rep: CycleReport) -> set[ManagedFile]:
        r = self.config.retention_ms
        cutoff = None if r is None else self.config.clock() - r
        out: set[ManagedFile] = set()
        for mf in self.files.by_state(FileState.SEALED, FileState.COMPACTED, FileState.UPLOADED):
            try:
                why = self._expired(mf, cutoff)
            except Exception as exc:  # noqa: BLE001 - the broker could not answer: keep the file, retry
                log.warning("expiry check failed, retrying later", extra={
                    "file": mf.stem, "state": mf.state.value, "error": f"{type(exc).__name__}: {exc}"})
                continue
            if why is not None:
                log.info("expiring", extra={"file": mf.stem, "state": mf.state.value, "reason": why})
                try:
                    self.lifecycle.expire(mf)
                    rep.expired.append(mf.stem)
                    out.add(mf)
                except Exception as exc:  # noqa: BLE001 - retried next cycle
                    log.warning("expire failed, retrying later", extra={"file": mf.stem, "state": mf.state.value,
                                                                       "error": f"{type(exc).__name__}: {exc}"})
                    rep.failed.append(mf.stem)
        return out

    def _drop_merged_away(self, markers: list[str]) -> None:
        """Files of this index that the cluster merged while this node was away (broker/cluster/published_merge.py
        puts `<store key>.merged` before it deletes such a file): no longer served, their manifests, filters and
        ranges removed (the merged file answers for their entries). The markers go with the orphans."""
        by_key = {mf.remote_key: mf for mf in self.files.by_state(FileState.UPLOADED)}
        for marker in markers:
            mf = by_key.get(marker.removesuffix(MERGED_AWAY_SUFFIX))
            if mf is None:
                continue
            self.files.remove(mf)
            mf.retire()
            unlist_input(self.folders, mf.stem)
            if self.lifecycle.filters is not None:
                self.lifecycle.filters.forget(mf.stem)
            log.warning("index file merged by the cluster while this node was away; no longer served",
                        extra={"file": mf.stem, "object": mf.remote_key, "marker": marker})

    def _sweep_orphans(self, rep: CycleReport) -> None:
        """Delete store objects under index/ that no manifest or pending upload claims: left by a
        crash between an expiry's manifest removal and its remote delete, or by an upload whose
        manifest was never written (it is re-uploaded from compacted/)."""
        store = self.lifecycle.store
        prefix = self.lifecycle.config.remote_prefix
        try:
            keys = store.list(prefix)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001
            log.warning("orphan sweep failed, retrying later", extra={"error": f"{type(exc).__name__}: {exc}"})
            return
        self._drop_merged_away([k for k in keys if k.endswith(MERGED_AWAY_SUFFIX)])
        live = self.files.by_state(FileState.UPLOADED)
        # a merged file's inputs stay until their grace has passed
        claimed = {mf.remote_key for mf in live} | {k for mf in live for _s, k in mf.replaces}
        pending = {mf.stem for mf in self.files.by_state(FileState.COMPACTED, FileState.SEALED)}
        orphans = [k for k in keys if k.removesuffix(FILTER_SUFFIX) not in claimed
                   and k[len(prefix):].removesuffix(FILTER_SUFFIX).removesuffix(COMPACTED_EXT) not in pending]
        if orphans:
            store.delete(orphans)  # type: ignore[union-attr]
            log.info("deleted orphan objects", extra={"keys": orphans, "count": len(orphans)})
        rep.orphans_deleted = orphans
        self._swept = True
