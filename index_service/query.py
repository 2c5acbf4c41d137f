"""The query planner: files overlapping the range, newest first, merged under a global counter.

Rules (each pins a known RocketMQ defect):
- a file is searched when its [oldest, newest] store time overlaps [begin_ms, end_ms];
- files are visited by newest store time, descending; once max_count hits are held and the next
  file's newest store time is older than the last held hit, no remaining file can place a hit in
  the answer, so the search stops and those files are never read (no GET for uploaded ones);
- the answer is exactly min(max_count, matches), ordered store time desc, then offset desc (then
  queue desc), one hit per (queue_id, offset) even when a record is in two files;
- native files match the 64-bit fingerprint of `topic#key` (exact=True); RocketMQ files match a
  32-bit hash only, so their hits go through the verifier when one is configured (and are dropped
  unless it confirms them), or are returned with exact=False for the caller to check;
- a file whose bytes fail a check (an uploaded file damaged in the store) is skipped: the answer comes
  from the other files and names the damaged one in `Hits.damaged`;
- a sealed file whose key filter says the key is not in it is skipped without a read (key_filters.py); a
  file without a usable filter is read;
- a file only partly inside what a registered build indexed whole (build_covers.py) is read only for the part of
  its time range outside the build's window, and not at all when the window holds what the lookup asks of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from index_file import IndexHit
from index_file.errors import FormatError
from index_file.hashing import fingerprint
from index_service.build_covers import covers_of, parts_to_read
from index_service.file_map import FileMap
from index_service.key_filters import FilterCache
from index_service.lookup_stats import LookupStats, start_counting, stop_counting
from index_service.managed_file import ManagedFile
from index_service.model import FileState
from index_service.ranges import IsLive
from storage_tier.errors import BlobNotFound

_UNBOUNDED = 1 << 30
_FILTERED = (FileState.COMPACTED, FileState.UPLOADED)


def _rank(h: IndexHit) -> tuple[int, int, int]:
    return (h.store_time_ms, h.offset, h.queue_id)


def merge(held: list[IndexHit], new: list[IndexHit], max_count: int) -> list[IndexHit]:
    """The best max_count of held + new, deduplicated by (queue_id, offset)."""
    if not new:
        return held
    out: list[IndexHit] = []
    seen: set[tuple[int, int]] = set()
    for h in sorted(held + new, key=_rank, reverse=True):
        loc = (h.queue_id, h.offset)
        if loc in seen:
            continue
        seen.add(loc)
        out.append(h)
        if len(out) >= max_count:
            break
    return out


@dataclass(frozen=True)
class DamagedFile:
    """An index file a query could not read: its store key (or path), the failed check, the error."""

    object: str
    check: str
    error: str


class Hits(list[IndexHit]):
    """The hits of a query, and the index files it skipped as damaged (an empty list when none)."""

    damaged: list[DamagedFile]

    def __init__(self, hits: list[IndexHit], damaged: list[DamagedFile]) -> None:
        super().__init__(hits)
        self.damaged = damaged


@dataclass
class QueryStats:
    files_considered: int = 0
    files_read: int = 0
    files_filtered: int = 0  # skipped unread: their key filter said no
    files_covered: int = 0  # skipped unread: a build's files hold all the lookup asks of them (build_covers.py)
    gets: int = 0  # object store GETs the lookup made
    stopped_early: bool = False
    damaged: list[DamagedFile] = field(default_factory=list)


def _damaged(mf: ManagedFile, exc: Exception) -> DamagedFile:
    """The caller reports it (the HTTP layer counts it and logs each file once)."""
    check = exc.check if isinstance(exc, FormatError) else "missing object"
    return DamagedFile(mf.remote_key or mf.location, check, str(exc))


def run_query(files: FileMap, topic: str, key: str, max_count: int, lo: int, hi: int,
              verifier: Callable[[IndexHit], bool] | None, stats: QueryStats | None = None,
              filters: FilterCache | None = None, lookups: LookupStats | None = None,
              is_live: IsLive | None = None) -> Hits:
    """is_live: the broker's trim (ranges.IsLive); entries of offsets it no longer stores are skipped, so a file
    that also holds live entries (a merged file mixes topics of different retention) answers only for those."""
    stats = stats if stats is not None else QueryStats()
    start_counting()
    try:
        hits = _run(files, topic, key, max_count, lo, hi, verifier, stats, filters, lookups, is_live)
    finally:
        stats.gets = stop_counting()
    if lookups is not None:
        lookups.lookup(stats.files_read, stats.gets, 0, 0, 0)
    return hits


def _run(files: FileMap, topic: str, key: str, max_count: int, lo: int, hi: int,
         verifier: Callable[[IndexHit], bool] | None, stats: QueryStats, filters: FilterCache | None,
         lookups: LookupStats | None, is_live: IsLive | None) -> Hits:
    held: list[IndexHit] = []
    cands = files.candidates(lo, hi)
    stats.files_considered = len(cands)
    fp = fingerprint(topic, key)
    maybe = no = false_positives = 0
    covers = covers_of([mf for _n, mf in cands], topic)
    for newest, mf in cands:
        if len(held) >= max_count and newest < held[-1].store_time_ms:
            stats.stopped_early = True  # the global counter: nothing older can enter the answer
            break
        spans = parts_to_read(mf, covers, lo, hi) if covers else None
        if spans == []:
            stats.files_covered += 1  # what the lookup asks of it is in a build's file
            continue
        filtered = filters is not None and mf.exact
        if filtered and not filters.may_contain(mf, fp):  # type: ignore[union-attr]
            no += 1
            stats.files_filtered += 1
            continue
        stats.files_read += 1
        try:
            if spans:  # only outside the covers' windows: one read over their hull, the covered hits left out
                first, last = spans[0][0], spans[-1][1]
                hits = [h for h in mf.query(topic, key, _UNBOUNDED if len(spans) > 1 else max_count, first, last)
                        if any(a <= h.store_time_ms <= b for a, b in spans)]
            elif mf.exact:
                hits = mf.query(topic, key, max_count, lo, hi)
            else:
                hits = mf.query(topic, key, _UNBOUNDED, lo, hi)  # candidates: some may fail verification
                if verifier is not None:
                    hits = _verified(hits, held, max_count, verifier)
            if is_live is not None:
                hits = _stored(mf, topic, key, max_count, lo, hi, hits, is_live)
        except (FormatError, BlobNotFound) as exc:
            stats.damaged.append(_damaged(mf, exc))
            continue
        if filtered and mf.state in _FILTERED:
            maybe += 1
            bounds = mf.time_bounds()
            if not hits and not spans and bounds is not None and lo <= bounds[0] and bounds[1] <= hi:
                false_positives += 1  # the whole file was searched: the key is not in it
        held = merge(held, hits, max_count)
    if lookups is not None:
        lookups.add(filter_maybe=maybe, filter_no=no, false_positives=false_positives)
    return Hits(held, stats.damaged)


def _stored(mf: ManagedFile, topic: str, key: str, max_count: int, lo: int, hi: int, hits: list[IndexHit],
            is_live: IsLive) -> list[IndexHit]:
    """`hits` without the entries whose offsets the broker has trimmed; when some were dropped from a full answer,
    the file is asked again without a bound so that the live entries behind them are not missed."""
    kept = [h for h in hits if is_live(topic, h.queue_id, h.offset)]
    if len(kept) < len(hits) and len(hits) >= max_count and mf.exact:
        kept = [h for h in mf.query(topic, key, _UNBOUNDED, lo, hi) if is_live(topic, h.queue_id, h.offset)]
    return kept


def _verified(hits: list[IndexHit], held: list[IndexHit], max_count: int,
              verifier: Callable[[IndexHit], bool]) -> list[IndexHit]:
    """Verify candidates best first, stopping once max_count confirmed hits (with the held ones)
    are certain; a confirmed hit is returned as exact."""
    out: list[IndexHit] = []
    floor = held[-1] if len(held) >= max_count else None
    for h in sorted(hits, key=_rank, reverse=True):
        if floor is not None and _rank(h) < _rank(floor):
            break
        if verifier(h):
            out.append(h._replace(exact=True))
            if len(out) >= max_count:
                break
    return out
