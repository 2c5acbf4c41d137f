"""Merging the published index files no live node's index service merges: a departed node's (`index_files/<node>`
of a node not alive for `departed_ms`) and those a failover rebuilt (`index_rescued/<node>.<epoch>`, once that
node has no index claims left, so no rescue of it runs again).

They are merged in the tiers of the index service's own merges (index_service/merging.py): the files of one list
whose newest store time falls in a closed UTC day (ended `settle_ms` ago) into one day file, those of a closed
week into one week file, at most `max_inputs` files and `max_items` items a merge, streamed
(index_file.merge.merge_compacted, memory bounded by `window_bytes` plus 8 B per distinct key for the filter).
A merged file lives under `index-merged/` in the index store, with its key filter beside it, and is published in
its own list, `index_merged/<source>` (`files.<node>` or `rescued.<node>.<epoch>`), which no node rewrites; a
lookup reads that list like every published list (broker/cluster/cluster_index.py) and its retention is the same
(broker/cluster/published_expiry.py). A file of a merged list can be merged again (days into a week).

The failover leader runs it after the expiry of published files (PublishedExpiry.maybe_run). Crash-safe steps,
each decided by the metadata KV:
1. prepare: a record `index_merges/<stem>` {"state": "prepared", "at": ms} is written; the merged file is put in
   the store and read back (size and CRC32C), its filter put beside it;
2. commit: ONE metadata transaction, applied only if both lists are still as read: the inputs' rows leave their
   lists, the merged file's row joins the merged list, and the record becomes {"state": "committed", "lists",
   "rows": the inputs' rows, "key", "at"}: a lookup reads the inputs or the merged file, never both;
3. release after `grace_ms`: the inputs' objects and filters are deleted from the store, then the record. Until
   then a lookup that read the lists before the commit still reads the inputs. An input of a departed node's own
   store prefix gets a marker `<its key>.merged` first, so that node's index service, should it come back with
   its index directory, drops that file instead of serving a file that is gone (index_service/lifecycle.py).
A record prepared more than `stale_ms` ago and never committed (a leader stopped in between) is undone: its
object and filter deleted, then the record. A list that changed between the read and the commit (the node came
back and published again) is left as it is; the merged object is deleted. A departed node that comes back within
the grace publishes its files again: the merge is then undone (the merged file leaves its list, the inputs of the
merged list go back to it, the merged object is deleted), so each entry is still listed once.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.cluster.cluster_index import FILES_PREFIX, MERGED_LIST_PREFIX
from broker.partitions.index_claims import CLAIMS_PREFIX
from broker.partitions.index_rescue import RESCUED_PREFIX
from index_file import RemoteCompactedIndexReader
from index_file.key_filter import FILTER_SUFFIX, encode_filter
from index_file.merge import merge_compacted
from index_service.merging import MERGED_AWAY_SUFFIX
from storage_tier.file_upload import put_file, stored_crc

log = logging.getLogger("mqindex.broker.cluster")

MERGES_PREFIX = "index_merges/"
MERGED_OBJECTS = "index-merged/"

DAY_MS = 86_400_000
_TIER = re.compile(r"-t(\d+)-[0-9a-f]{8}\.mqxc$")


@dataclass(frozen=True)
class PublishedMergeConfig:
    tiers_ms: tuple[int, ...] = (DAY_MS, 7 * DAY_MS)
    settle_ms: int = 3_600_000
    min_files: int = 2
    max_inputs: int = 32
    max_items: int = 16_000_000
    window_bytes: int = 8 << 20
    grace_ms: int = 600_000
    departed_ms: int = DAY_MS  # a node not alive this long has its list merged
    stale_ms: int = 3_600_000  # a prepared merge never committed this long after is undone


def config_from_index(index_config: Any) -> PublishedMergeConfig | None:
    """The merge's settings from the node's index settings (`cluster_merge_*` of index_service's ServiceConfig, set
    by `serve` flags, config file keys and MQINDEX_*); None when its tiers are () (no merges)."""
    if index_config is None:
        return PublishedMergeConfig()
    tiers = tuple(getattr(index_config, "cluster_merge_tiers_ms", PublishedMergeConfig.tiers_ms))
    if not tiers:
        return None
    d = PublishedMergeConfig()
    return PublishedMergeConfig(
        tiers_ms=tiers, settle_ms=int(getattr(index_config, "cluster_merge_settle_ms", d.settle_ms)),
        departed_ms=int(getattr(index_config, "cluster_merge_departed_ms", d.departed_ms)),
        grace_ms=int(getattr(index_config, "cluster_merge_grace_ms", d.grace_ms)),
        max_inputs=int(getattr(index_config, "cluster_merge_max_inputs", d.max_inputs)),
        max_items=int(getattr(index_config, "cluster_merge_max_items", d.max_items)))


@dataclass
class PublishedMergeStats:
    """Totals since this merger was made (the failover leader's; exported on /metrics, shown by the console)."""

    runs: int = 0
    merges: int = 0  # merged files committed
    files_merged: int = 0  # input files they replaced
    bytes_written: int = 0  # bytes of merged files put in the store
    failures: int = 0  # merges that failed (retried at the next run)
    backlog: int = 0  # published files due for a merge and not merged, as of the last run
    awaiting_release: int = 0  # inputs of committed merges not deleted yet (the grace), as of the last run
    last_merge_ms: int | None = None
    last_merged_file: str | None = None


@dataclass
class PublishedMergeReport:
    merged: list[str] = field(default_factory=list)  # store keys of merged files committed
    released: list[str] = field(default_factory=list)  # store keys of inputs deleted after the grace
    undone: list[str] = field(default_factory=list)  # store keys of merged files dropped (never committed)


def row_tier(location: str) -> int:
    """The tier of a published file from its store key (`...-t<tier>-<8 hex>.mqxc`; 0 for a file as written)."""
    m = _TIER.search(location)
    return int(m.group(1)) if m else 0


def merged_list_key(source: str) -> str:
    """The merged list of a source list: `index_files/7` -> `index_merged/files.7`."""
    if source.startswith(FILES_PREFIX):
        return f"{MERGED_LIST_PREFIX}files.{source[len(FILES_PREFIX):]}"
    return f"{MERGED_LIST_PREFIX}rescued.{source[len(RESCUED_PREFIX):]}"


def plan_rows(rows: list[list[Any]], cfg: PublishedMergeConfig, now: int, cutoff: int | None
              ) -> list[tuple[int, list[list[Any]]]]:
    """(tier, input rows) of every merge due now among the rows of one list and its merged list; no row in two."""
    out: list[tuple[int, list[list[Any]]]] = []
    used: set[str] = set()
    for tier, span in enumerate(cfg.tiers_ms, 1):
        windows: dict[int, list[list[Any]]] = defaultdict(list)
        for r in rows:
            newest = int(r[2])
            if r[0] in used or row_tier(r[0]) > tier or (cutoff is not None and newest < cutoff):
                continue
            w = newest // span
            if (w + 1) * span + cfg.settle_ms <= now:
                windows[w].append(r)
        for w in sorted(windows):
            group = sorted(windows[w], key=lambda r: (int(r[1]), str(r[0])))
            if len(group) < cfg.min_files or all(row_tier(r[0]) == tier for r in group):
                continue
            batch = group[:cfg.max_inputs]
            if len(batch) >= 2:
                out.append((tier, batch))
                used.update(r[0] for r in batch)
    return out


def merged_row(key: str, inputs: list[list[Any]], min_ms: int | None, max_ms: int | None) -> list[Any]:
    """The published row of a merged file: its times those of the inputs' rows (so a query's range selects it as
    it selected them), its offset ranges their union when every input has them."""
    row: list[Any] = [key, min(int(r[1]) for r in inputs), max(int(r[2]) for r in inputs)]
    if min_ms is not None:
        row[1] = min(row[1], min_ms)
    if max_ms is not None:
        row[2] = max(row[2], max_ms)
    if all(len(r) > 3 and r[3] for r in inputs):
        union: dict[tuple[str, int], tuple[int, int]] = {}
        for r in inputs:
            for t, q, lo, hi in r[3]:
                cur = union.get((t, q))
                union[(t, q)] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
        row.append([[t, q, lo, hi] for (t, q), (lo, hi) in sorted(union.items())])
    return row


class PublishedMerger:
    def __init__(self, meta: Any, store: Any, clock: Callable[[], int],
                 config: PublishedMergeConfig | None = None, work_dir: Path | None = None) -> None:
        self.meta = meta
        self.store = store  # the index store (a BlobStore)
        self.clock = clock
        self.config = config or PublishedMergeConfig()
        self.work_dir = work_dir
        self.hook: Callable[[str], None] | None = None  # tests: called at "merge:prepared" (before the commit)
        self._absent_since: dict[int, int] = {}  # node -> when this merger first saw it not alive
        self.stats = PublishedMergeStats()

    def run_once(self, alive: set[int]) -> PublishedMergeReport:
        rep = PublishedMergeReport()
        self.meta.catch_up()
        now = self.clock()
        self.settle(rep, now)
        sources = self.sources(alive, now)
        for source in sources:
            self.merge_list(source, now, rep)
        self._count_pending(sources, now)
        self.stats.runs += 1
        return rep

    def _count_pending(self, sources: list[str], now: int) -> None:
        """The backlog (files of the lists merged here that a merge is due for) and the inputs awaiting release."""
        backlog = 0
        for source in sources:
            mkey = source if source.startswith(MERGED_LIST_PREFIX) else merged_list_key(source)
            rows = [r for k in {source, mkey} for r in json.loads(self.meta.kv_get(k, refresh=False) or "[]")]
            backlog += sum(len(inputs) for _tier, inputs in plan_rows(rows, self.config, now, None))
        self.stats.backlog = backlog
        records = [json.loads(b) for b in self.meta.kv_items(MERGES_PREFIX, refresh=False).values()]
        self.stats.awaiting_release = sum(len(r.get("rows", [])) for r in records if r.get("state") == "committed")

    def sources(self, alive: set[int], now: int) -> list[str]:
        """The lists merged here: departed nodes' (not alive for departed_ms, as this merger saw them) and
        rescues of nodes with no claims left."""
        out = []
        for key in self.meta.kv_items(FILES_PREFIX, refresh=False):
            name = key[len(FILES_PREFIX):]
            if not name.isdigit():
                continue
            node = int(name)
            if node in alive:
                self._absent_since.pop(node, None)
                continue
            since = self._absent_since.setdefault(node, now)
            if now - since >= self.config.departed_ms:
                out.append(key)
        claims = self.meta.kv_items(CLAIMS_PREFIX, refresh=False)
        for key in self.meta.kv_items(RESCUED_PREFIX, refresh=False):
            node = key[len(RESCUED_PREFIX):].split(".")[0]
            if f"{CLAIMS_PREFIX}{node}" not in claims:
                out.append(key)
        # merged lists whose source list is gone (every file merged, or expired) can still merge days into weeks
        named = {merged_list_key(k) for k in out}
        for key in self.meta.kv_items(MERGED_LIST_PREFIX, refresh=False):
            if key not in named:
                out.append(key)
        return sorted(set(out))

    def merge_list(self, source: str, now: int, rep: PublishedMergeReport) -> None:
        mkey = source if source.startswith(MERGED_LIST_PREFIX) else merged_list_key(source)
        bodies = {k: self.meta.kv_get(k, refresh=False) for k in {source, mkey}}
        rows = {k: json.loads(b) if b else [] for k, b in bodies.items()}
        for tier, inputs in plan_rows([r for k in rows for r in rows[k]], self.config, now, None):
            try:
                key = self.merge(source, mkey, bodies, rows, tier, inputs)
            except Exception as exc:  # noqa: BLE001 - the inputs still serve; tried again at the next run
                self.stats.failures += 1
                log.warning("merge of published index files failed, retrying later", extra={
                    "list": source, "tier": tier, "files": [r[0] for r in inputs],
                    "error": f"{type(exc).__name__}: {exc}"})
                return
            if key is None:
                return  # a list changed meanwhile: read again at the next run
            rep.merged.append(key)
            bodies = {k: self.meta.kv_get(k, refresh=False) for k in bodies}
            rows = {k: json.loads(b) if b else [] for k, b in bodies.items()}

    def merge(self, source: str, mkey: str, bodies: dict[str, str | None], rows: dict[str, list[list[Any]]],
              tier: int, inputs: list[list[Any]]) -> str | None:
        cfg = self.config
        readers = [RemoteCompactedIndexReader(self.store, str(r[0])) for r in inputs]
        try:
            items = 0
            batch: list[list[Any]] = []
            used: list[RemoteCompactedIndexReader] = []
            for r, rd in zip(inputs, readers, strict=True):
                if batch and items + rd.header.item_count > cfg.max_items:
                    break
                batch.append(r)
                used.append(rd)
                items += rd.header.item_count
            if len(batch) < 2:
                return None
            inputs = batch
            begin = min(int(r[1]) for r in inputs)
            stem = f"{max(begin, 0):016d}-t{tier}-{uuid.uuid4().hex[:8]}"
            key = f"{MERGED_OBJECTS}{stem}.mqxc"
            record_key = f"{MERGES_PREFIX}{stem}"
            self.meta.kv_put(record_key, json.dumps({"state": "prepared", "key": key, "at": self.clock()}))
            work = Path(tempfile.mkdtemp(prefix="mqindex-published-merge-", dir=self.work_dir))
            try:
                scratch = work / f"{stem}.mqxc"
                st = merge_compacted(used, scratch, cfg.window_bytes)
                size = put_verified(self.store, scratch, key)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            self.store.put(key + FILTER_SUFFIX, encode_filter(st.fingerprints))
            if self.hook is not None:
                self.hook("merge:prepared")
        finally:
            for rd in readers:
                rd.close()
        gone = {str(r[0]) for r in inputs}
        new_rows = {k: [r for r in v if str(r[0]) not in gone] for k, v in rows.items()}
        new_rows[mkey] = sorted([*new_rows.get(mkey, []), merged_row(key, inputs, st.min_ms, st.max_ms)],
                                key=lambda r: str(r[0]))
        where = {str(r[0]): k for k, v in rows.items() for r in v}
        record = {"state": "committed", "key": key, "at": self.clock(),
                  "rows": [[where[str(r[0])], r] for r in inputs]}
        put = {k: json.dumps(v) for k, v in new_rows.items() if v}
        put[record_key] = json.dumps(record)
        delete = [k for k, v in new_rows.items() if not v]
        if not self.meta.kv_update_if(dict(bodies), put, delete):  # the commit
            log.info("a published list changed during a merge; the merged file is dropped",
                     extra={"list": source, "file": key})
            self.store.delete([key, key + FILTER_SUFFIX])
            self.meta.kv_delete(record_key)
            return None
        self.stats.merges += 1
        self.stats.files_merged += len(inputs)
        self.stats.bytes_written += size
        self.stats.last_merge_ms, self.stats.last_merged_file = self.clock(), key
        log.info("published index files merged", extra={
            "list": source, "merged_list": mkey, "file": key, "tier": tier, "inputs": sorted(gone),
            "items": st.items, "duplicates_dropped": st.duplicates_dropped, "bytes": size})
        return key

    def settle(self, rep: PublishedMergeReport, now: int) -> None:
        """Release the inputs of merges committed `grace_ms` ago; undo merges prepared long ago and never
        committed."""
        cfg = self.config
        for rkey, body in sorted(self.meta.kv_items(MERGES_PREFIX, refresh=False).items()):
            rec = json.loads(body)
            if rec["state"] == "prepared":
                if now - int(rec["at"]) >= cfg.stale_ms:
                    self.store.delete([rec["key"], rec["key"] + FILTER_SUFFIX])
                    self.meta.kv_delete(rkey)
                    rep.undone.append(rec["key"])
                    log.info("a merge of published index files never committed was undone",
                             extra={"file": rec["key"]})
                continue
            if now - int(rec["at"]) < cfg.grace_ms:
                continue
            if self._named_again(rec):
                self.undo(rkey, rec)
                rep.undone.append(rec["key"])
                continue
            keys = [str(row[0]) for _list, row in rec["rows"]]
            for lst, row in rec["rows"]:
                if lst.startswith(FILES_PREFIX):  # a departed node's own file: told to its index, should it return
                    self.store.put(str(row[0]) + MERGED_AWAY_SUFFIX, rec["key"].encode())
            self.store.delete(keys + [k + FILTER_SUFFIX for k in keys])
            self.meta.kv_delete(rkey)
            rep.released += keys
            log.info("merged published index files deleted after the grace", extra={"file": rec["key"],
                                                                                      "inputs": keys})

    def _named_again(self, rec: dict[str, Any]) -> bool:
        """Whether a departed node came back and published again a file this merge replaced."""
        for lst, row in rec["rows"]:
            if lst.startswith(FILES_PREFIX):
                body = self.meta.kv_get(lst, refresh=False)
                if body and any(str(r[0]) == str(row[0]) for r in json.loads(body)):
                    return True
        return False

    def undo(self, rkey: str, rec: dict[str, Any]) -> None:
        """A node came back and serves its files again: the merged file leaves its list (the inputs that came
        from the merged list go back to it), then its object, then the record; the node's files stay."""
        mkey = next((lst for lst, _r in rec["rows"] if lst.startswith(MERGED_LIST_PREFIX)), None)
        while True:
            lists = {k: self.meta.kv_get(k, refresh=True) for k in
                     {merged_list_key(lst) for lst, _r in rec["rows"] if not lst.startswith(MERGED_LIST_PREFIX)}
                     | ({mkey} if mkey else set())}
            put, delete = {}, []
            for k, body in lists.items():
                rows = [r for r in (json.loads(body) if body else []) if str(r[0]) != rec["key"]]
                rows += [r for lst, r in rec["rows"] if lst == k]
                if rows:
                    put[k] = json.dumps(sorted(rows, key=lambda r: str(r[0])))
                else:
                    delete.append(k)
            if self.meta.kv_update_if(lists, put, delete):
                break
        self.store.delete([rec["key"], rec["key"] + FILTER_SUFFIX])
        self.meta.kv_delete(rkey)
        log.info("a merge of published index files was undone: their node is back",
                 extra={"file": rec["key"], "inputs": [r[0] for _l, r in rec["rows"]]})


def put_verified(store: Any, path: Path, key: str, part: int = 16 << 20) -> int:
    """Put a local file at `key` (in parts above `part` bytes), then check the object's size and CRC32C read back
    in parts; its size."""
    size, crc = put_file(store, path, key, part)
    if store.size(key) != size:
        raise OSError(f"{key}: stored {store.size(key)} bytes, the merged file has {size}")
    got = stored_crc(store, key, size, part)
    if got != crc:
        raise OSError(f"{key}: CRC32C {got:#x} read back, the merged file has {crc:#x}")
    return size
