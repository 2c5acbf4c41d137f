"""Retention of the published index files no live node's index service expires: a departed node's
(`index_files/<node>` of a node not alive), those a failover rebuilt (`index_rescued/<node>.<epoch>`) and the
files those were merged into (`index_merged/<source>`; the merges run after each expiry run, see
broker/cluster/published_merge.py).

They follow the rules of every other index file (index_service/background.py): a file expires once the broker
has trimmed every offset range in it (the topic's retention; a deleted topic's ranges are dead), or once its
newest store time is older than the index-only retention (--index-retention-ms). A published row is
`[store key, oldest store time, newest store time]`, optionally followed by its offset ranges
`[[topic, partition, lowest, highest], ...]`; a row without them (published by an earlier version, or of a file
whose ranges are unknown) expires by the index-only retention alone.

The node that fails the others over (the live node with the lowest id) runs it every `interval_s`. Crash-safe
order: a list is first rewritten without its expired rows (only if it did not change meanwhile, so a node that
came back and republished is not overwritten), then the objects and their key filters are deleted: a lookup
never reads a listed file that is gone; a stop in between leaves objects no list names.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from broker.cluster.cluster_index import FILES_PREFIX, MERGED_LIST_PREFIX
from broker.cluster.published_merge import PublishedMergeConfig, PublishedMerger
from broker.partitions.index_rescue import RESCUED_PREFIX
from index_file.key_filter import FILTER_SUFFIX

log = logging.getLogger("mqindex.broker.cluster")

IsLive = Callable[[str, int, int], bool]
DEFAULT_INTERVAL_S = 30.0
DEFAULT_MERGE = PublishedMergeConfig()


def row_expired(row: list[Any], is_live: IsLive, cutoff: int | None) -> bool:
    if cutoff is not None and int(row[2]) < cutoff:
        return True
    ranges = row[3] if len(row) > 3 else None
    return bool(ranges) and all(not is_live(str(t), int(q), int(hi)) for t, q, _lo, hi in ranges)


class PublishedExpiry:
    def __init__(self, meta: Any, store: Any, is_live: IsLive, retention_ms: int | None,
                 clock: Callable[[], int], interval_s: float = DEFAULT_INTERVAL_S,
                 merge_config: PublishedMergeConfig | None = DEFAULT_MERGE) -> None:
        self.meta = meta
        self.store = store  # the index store (a BlobStore), where the published files are
        self.is_live = is_live
        self.retention_ms = retention_ms
        self.clock = clock
        self.interval_s = interval_s
        self._last = 0.0
        # departed nodes' and rescued files merged into fewer (broker/cluster/published_merge.py)
        self.merger: PublishedMerger | None = (PublishedMerger(meta, store, clock, merge_config)
                                               if merge_config is not None else None)

    def due(self) -> bool:
        """Whether `maybe_run` would run now."""
        return time.monotonic() - self._last >= self.interval_s

    def maybe_run(self, alive: set[int]) -> list[str]:
        """Expire what is due, then merge what is due (`merger`, when set)."""
        if not self.due():
            return []
        self._last = time.monotonic()
        try:
            out = self.run_once(alive)
        except Exception as exc:  # noqa: BLE001 - the next run tries again
            log.warning("expiry of published index files failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            return []
        if self.merger is not None:
            try:
                self.merger.run_once(alive)
            except Exception as exc:  # noqa: BLE001 - the next run tries again
                log.warning("merge of published index files failed",
                            extra={"error": f"{type(exc).__name__}: {exc}"})
        return out

    def run_once(self, alive: set[int]) -> list[str]:
        """Expire the published files of the nodes not in `alive` and the rescued ones; returns their keys."""
        self.meta.catch_up()
        lists = {k: v for k, v in self.meta.kv_items(FILES_PREFIX, refresh=False).items()
                 if k[len(FILES_PREFIX):].isdigit() and int(k[len(FILES_PREFIX):]) not in alive}
        lists.update(self.meta.kv_items(RESCUED_PREFIX, refresh=False))
        lists.update(self.meta.kv_items(MERGED_LIST_PREFIX, refresh=False))
        cutoff = None if self.retention_ms is None else self.clock() - self.retention_ms
        deleted: list[str] = []
        for key, body in sorted(lists.items()):
            rows = json.loads(body)
            gone = [r for r in rows if row_expired(r, self.is_live, cutoff)]
            if not gone:
                continue
            kept = [r for r in rows if r not in gone]
            # the list first: once no list names a file no lookup reads it, then its objects go
            if not self.meta.kv_set_if({key: body}, key, json.dumps(kept) if kept else None):
                continue  # rewritten meanwhile (the node came back): looked at again next time
            locations = [str(r[0]) for r in gone]
            self.store.delete(locations + [k + FILTER_SUFFIX for k in locations])
            deleted += locations
            log.info("published index files expired", extra={"list": key, "files": locations})
        return deleted
