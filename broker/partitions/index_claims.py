"""IndexClaims: for each partition, the lowest offset this node's index holds only locally (not in an index file
it has uploaded and published), kept in the metadata KV (`index_claims/<node>`), so that when the node dies for
good a survivor knows which index entries went with it and rebuilds them from the stream objects.

- `guard(put_batch)`: the dispatcher's puts go through it; the claim of a partition is on record before its
  first entry reaches the index, so no entry exists that no claim covers;
- `release(topic, partition, last)` at a hand-off: this node indexes nothing of the partition after `last`;
- `narrow(files, published)` after the node published its uploaded files: each claim moves up to the lowest
  offset still held only locally, or past the highest one uploaded; a released claim with nothing left is
  dropped.
A claim may cover more than the node holds (a partition that went away and came back), never less: entries
indexed twice are merged away by the cluster-wide lookup, which de-duplicates by (partition, offset).
"""

from __future__ import annotations

import json
import logging
import operator
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from broker.metadata import MetadataClient
from index_service.batch_spans import queue_groups

log = logging.getLogger("mqindex.broker.index_claims")

CLAIMS_PREFIX = "index_claims/"
QueueKey = tuple[str, int]
#: one index file: (location, state, offset ranges {(topic, partition): (lowest, highest)} or None: unknown)
FileRanges = tuple[str, str, dict[QueueKey, tuple[int, int]] | None]


@dataclass(frozen=True)
class Claim:
    topic: str
    partition: int
    lo: int  # lowest offset possibly held only in the node's local index files
    last: int | None  # the last offset it indexed before handing the partition over; None: still indexing


def claims_key(node_id: int) -> str:
    return f"{CLAIMS_PREFIX}{node_id}"


def parse_claims(body: str | None) -> list[Claim]:
    if not body:
        return []
    doc = json.loads(body)
    return [Claim(str(t), int(q), int(lo), None if last is None else int(last)) for t, q, lo, last in doc["claims"]]


def read_claims(meta: MetadataClient, node_id: int) -> list[Claim]:
    """A node's claims as last recorded."""
    return parse_claims(meta.kv_get(claims_key(node_id)))


_TOPIC, _QUEUE, _OFFSET = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)
_COLUMNAR_FROM = 64  # entries; below this the plain loop is cheaper than building arrays
_I64_MAX = (1 << 63) - 1


def first_offsets(entries: Sequence[Any]) -> dict[QueueKey, int]:
    """The lowest offset of each (topic, partition) among index entries (IndexEntry or 6-tuples).

    Columnar for a dispatch batch (C-level map and numpy: a dense group id per entry, the minimum per group
    with np.minimum.at), the plain loop for small batches, partition numbers spread too wide for a dense id,
    or anything the arrays cannot hold (the index refuses those anyway)."""
    n = len(entries)
    if n >= _COLUMNAR_FROM:
        try:
            q = np.fromiter(map(_QUEUE, entries), dtype=np.int64, count=n)
            off = np.fromiter(map(_OFFSET, entries), dtype=np.int64, count=n)
            names, width, gid = queue_groups(list(map(_TOPIC, entries)), q)
            if q.min() >= 0 and width * len(names) <= 4 * n:
                mins = np.full(width * len(names), _I64_MAX, dtype=np.int64)
                np.minimum.at(mins, gid, off)
                seen = np.zeros(len(mins), dtype=bool)
                seen[gid] = True
                groups = np.flatnonzero(seen)
                return {(names[gv // width], gv % width): lo
                        for gv, lo in zip(groups.tolist(), mins[groups].tolist(), strict=True)}
        except (TypeError, ValueError, OverflowError, IndexError):
            pass
    firsts: dict[QueueKey, int] = {}
    for e in entries:
        k = (e[0], e[1])
        if k not in firsts or e[2] < firsts[k]:
            firsts[k] = e[2]
    return firsts


class IndexClaims:
    def __init__(self, meta: MetadataClient, node_id: int) -> None:
        self.meta = meta
        self.node_id = node_id
        self._lock = threading.Lock()
        # a restarted node recovers its local index from disk: what its previous incarnation claimed still holds
        self._claims: dict[QueueKey, Claim] = {(c.topic, c.partition): c for c in read_claims(meta, node_id)}

    def snapshot(self) -> list[Claim]:
        with self._lock:
            return sorted(self._claims.values(), key=lambda c: (c.topic, c.partition))

    def guard(self, put_batch: Callable[[Sequence[Any]], object]) -> Callable[[Sequence[Any]], object]:
        def put(entries: Sequence[Any]) -> object:
            self.cover(first_offsets(entries))
            return put_batch(entries)
        return put

    def cover(self, firsts: dict[QueueKey, int]) -> None:
        """Claim the partitions of entries about to be indexed (first offset of each)."""
        with self._lock:
            updates: dict[QueueKey, Claim] = {}  # (every batch comes here: no copy of the claims unless they change)
            for k, off in firsts.items():
                c = self._claims.get(k)
                if c is not None and c.last is None and c.lo <= off:
                    continue
                if c is None or (c.last is not None and c.lo > c.last):
                    lo = off
                else:
                    lo = min(c.lo, off)
                updates[k] = Claim(k[0], k[1], lo, None)
            if updates:
                self._save({**self._claims, **updates})

    def release(self, topic: str, partition: int, last: int | None) -> None:
        """A hand-off: the index holds nothing of the partition after `last` (None: nothing at all)."""
        with self._lock:
            claims = dict(self._claims)
            c = claims.get((topic, partition))
            if c is None:
                return
            if last is None or c.lo > last:
                del claims[(topic, partition)]
            else:
                claims[(topic, partition)] = Claim(topic, partition, c.lo, last)
            self._save(claims)

    def narrow(self, files: Iterable[FileRanges], published: set[str]) -> None:
        """Move the claims past what the published uploaded files hold. `files` must be read before the
        files were listed for publication, so that a file counts as uploaded only when it was published."""
        uploaded_hi: dict[QueueKey, int] = {}
        local_lo: dict[QueueKey, int] = {}
        for location, state, ranges in files:
            if ranges is None:
                continue
            for k, (lo, hi) in ranges.items():
                if state == "UPLOADED" and location in published:
                    uploaded_hi[k] = max(uploaded_hi.get(k, hi), hi)
                else:
                    local_lo[k] = min(local_lo.get(k, lo), lo)
        with self._lock:
            claims = dict(self._claims)
            changed = False
            for k, c in list(claims.items()):
                if k in local_lo:
                    lo = local_lo[k]
                elif k in uploaded_hi:
                    lo = max(c.lo, uploaded_hi[k] + 1)
                else:
                    lo = c.lo  # nothing written yet: the entries are on their way to the writing file
                if c.last is not None and lo > c.last:
                    del claims[k]
                    changed = True
                elif lo != c.lo:
                    claims[k] = Claim(c.topic, c.partition, lo, c.last)
                    changed = True
            if changed:
                self._save(claims)

    def _save(self, claims: dict[QueueKey, Claim]) -> None:
        """Store the claims, then hold them: a store that failed (the metadata database did not answer) changes
        nothing here, so the same claim is stored when it is asked for again."""
        body = json.dumps({"claims": [[c.topic, c.partition, c.lo, c.last] for c in
                                      sorted(claims.values(), key=lambda c: (c.topic, c.partition))]})
        self.meta.kv_put(claims_key(self.node_id), body)
        self._claims = claims
