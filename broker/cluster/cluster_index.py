"""Key lookups across the cluster: every node's index, each file read once per query.

`ClusterIndex.query` has IndexService.query's contract (newest first: store time, then offset, then
partition; exactly min(max_count, matches); no duplicates) over the whole cluster:
- this node's IndexService answers for its own files (writing, compacted and uploaded);
- another live node that may hold entries of the topic not yet uploaded (it has an index claim on one of the
  topic's partitions, `index_claims/<node>` in the metadata KV) answers for its own files through its HTTP API
  (`/v1/internal/index/query`), in parallel: entries not yet uploaded are reached where they live;
- every other node, alive without a claim on the topic or not alive (shut down, or its lease expired), holds
  nothing of the topic beyond the uploaded files it publishes in the metadata KV (`index_files/<node>`: store
  key and time range of each), so those are read directly from the object store, one ranged GET per file after
  a cached summary load; so are the files a failover rebuilt from what a dead node held only locally
  (`index_rescued/<node>.<epoch>`, same format), and the files those two kinds of list were merged into
  (`index_merged/<source>`, broker/cluster/published_merge.py); a file whose key filter (`<store key>.filter`)
  rules the key out is not read. A node publishes its files before it narrows its claims, so
  the claims and the published lists are read from one caught-up image: a claim read as gone means the files
  that replaced it are listed.
  A published file is `[store key, oldest store time it may hold, newest store time]`; a query's range is
  matched against both. The oldest is the earlier of the file's creation and its oldest entry: entries can be
  older than the file (dispatched late after a roll; a rescue indexes old records at their own times). Files
  published before the oldest entry was counted carry their creation time there (the same three fields, so
  nodes of either version read each other's lists).
Each node's files are read by exactly one of these paths, so no file is read twice for one query. The
answers are merged, de-duplicated by (partition, offset) and cut at max_count.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from broker.cluster.membership import Membership
from broker.cluster.peers import Peers
from broker.metadata import MetadataClient
from broker.partitions.index_claims import CLAIMS_PREFIX, parse_claims
from broker.partitions.index_rescue import RESCUED_PREFIX, published_row
from index_file import IndexHit, RemoteCompactedIndexReader
from index_service.key_filters import ObjectFilters
from index_service.query import Hits

log = logging.getLogger("mqindex.broker.cluster")

FILES_PREFIX = "index_files/"
#: files merged from a departed node's list or a rescue's (broker/cluster/published_merge.py), read by every node
MERGED_LIST_PREFIX = "index_merged/"
LocalQuery = Callable[[str, str, int, int, int | None], list[IndexHit]]


def time_overlaps(row: list[Any], begin_ms: int, end_ms: int) -> bool:
    """Whether a published file can hold entries with store times in [begin_ms, end_ms]."""
    return row[2] >= begin_ms and row[1] <= end_ms


def publish_files(meta: MetadataClient, node_id: int, files: list[dict[str, Any]],
                  ranges: dict[str, Any] | None = None) -> None:
    """Record this node's uploaded index files (store key, begin, newest and oldest store time, and the offset
    ranges when known: `ranges` maps a location to {(topic, partition): (lowest, highest)}) in the KV when they
    changed."""
    known = ranges or {}
    body = json.dumps(sorted((published_row(f["location"], f["begin_ms"], f["end_ms"], f.get("min_ms"),
                                            known.get(f["location"]))
                              for f in files if f["state"] == "UPLOADED"), key=lambda x: x[0]))
    key = f"{FILES_PREFIX}{node_id}"
    if meta.kv_get(key) != body:
        meta.kv_put(key, body)


def index_file_rows(index: Any) -> list[dict[str, Any]]:
    """The index's files as the API shows them (state, begin/end ms, items, location), with the oldest store time
    (`min_ms`, None while empty) for the published list."""
    out = []
    for f in index.files():
        state = f.state.value if hasattr(f.state, "value") else str(f.state)
        out.append({"state": state, "begin_ms": f.begin_ms, "end_ms": f.end_ms if f.end_ms is not None else f.begin_ms,
                    "items": f.items, "location": f.location, "min_ms": f.min_ms})
    return out


def merge_hits(groups: list[list[IndexHit]], max_count: int) -> list[IndexHit]:
    seen: set[tuple[int, int]] = set()
    out = []
    for h in sorted((h for g in groups for h in g), key=lambda h: (h.store_time_ms, h.offset, h.queue_id),
                    reverse=True):
        if (h.queue_id, h.offset) in seen:
            continue
        seen.add((h.queue_id, h.offset))
        out.append(h)
        if len(out) == max_count:
            break
    return out


class ClusterIndex:
    def __init__(self, node_id: int, local: LocalQuery, membership: Membership, peers: Peers,
                 meta: MetadataClient, index_store: Any, max_readers: int = 256,
                 filter_cache_bytes: int | None = None) -> None:
        self.node_id = node_id
        self.local = local
        self.membership = membership
        self.peers = peers
        self.meta = meta
        self.index_store = index_store
        self._readers: OrderedDict[str, RemoteCompactedIndexReader] = OrderedDict()
        self._max_readers = max_readers
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="cluster-query")
        # the key filter beside each published file: a file whose filter says no is never read
        self.filters = ObjectFilters(index_store) if filter_cache_bytes is None else \
            ObjectFilters(index_store, filter_cache_bytes)

    def query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int | None) -> list[IndexHit]:
        alive = self.membership.alive()
        asked = self.nodes_to_ask(topic, alive)
        futures = [self._pool.submit(self.peers.index_query, alive[nid].http, topic, key, max_count, begin_ms,
                                     end_ms) for nid in asked]
        local = self.local(topic, key, max_count, begin_ms, end_ms)
        groups = [local, *self._published(set(asked), topic, key, max_count, begin_ms, end_ms)]
        groups += [f.result() for f in futures]
        # damaged local files the index skipped stay reported (key_lookup lists them as unreadable)
        return Hits(merge_hits(groups, max_count), list(getattr(local, "damaged", [])))

    def nodes_to_ask(self, topic: str, alive: dict[int, Any]) -> list[int]:
        """The other live nodes that may hold entries of `topic` not yet uploaded: those with an index claim on
        one of its partitions. Reads the metadata caught up (one query), so a claim recorded before an entry was
        acknowledged is seen, and `_published` then reads the lists of the same image."""
        claims = self.meta.kv_items(CLAIMS_PREFIX, refresh=True)
        out = []
        for nid, n in sorted(alive.items()):
            if nid == self.node_id or not n.http:
                continue
            if any(c.topic == topic for c in parse_claims(claims.get(f"{CLAIMS_PREFIX}{nid}"))):
                out.append(nid)
        return out

    def _published(self, asked: set[int], topic: str, key: str, max_count: int, begin_ms: int,
                   end_ms: int | None) -> list[list[IndexHit]]:
        """Hits from the published uploaded files of the nodes not asked (this one excepted: its own index
        answers for its files)."""
        out = []
        hi = end_ms if end_ms is not None else 1 << 62
        published = []
        for k, v in self.meta.kv_items(FILES_PREFIX, refresh=False).items():
            node = int(k[len(FILES_PREFIX):])
            if node == self.node_id or node in asked:
                continue
            published.append(v)
        # index entries a dead node held only locally, rebuilt by the failover (no node answers for them)
        published += self.meta.kv_items(RESCUED_PREFIX, refresh=False).values()
        # those files merged into fewer, larger ones (their rows left the lists above in the same transaction)
        published += self.meta.kv_items(MERGED_LIST_PREFIX, refresh=False).values()
        for v in published:
            for row in json.loads(v):
                if not time_overlaps(row, begin_ms, hi) or not self.filters.may_contain(row[0], topic, key):
                    continue
                out.append(self._reader(row[0]).query(topic, key, max_count, begin_ms, hi))
        return out

    def _reader(self, location: str) -> RemoteCompactedIndexReader:
        with self._lock:
            r = self._readers.get(location)
            if r is not None:
                self._readers.move_to_end(location)
                return r
        r = RemoteCompactedIndexReader(self.index_store, location)
        with self._lock:
            self._readers[location] = r
            while len(self._readers) > self._max_readers:
                self._readers.popitem(last=False)[1].close()
        return r

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        with self._lock:
            for r in self._readers.values():
                r.close()
            self._readers.clear()
