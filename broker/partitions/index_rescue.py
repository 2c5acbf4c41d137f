"""Index rescue: rebuild, from the stream objects, the index entries a dead node held only in its local index
files (its claims, see index_claims.py), as uploaded index files of their own that every node reads like a
departed node's published files (KV `index_rescued/<node>.<fenced epoch>`).

A separate IndexService under its own store prefix, opened for the rebuild and closed after it, rather than
the survivor's own index: the survivor's index drops offsets at or below its checkpoint for a partition, and
a partition the dead node had handed over may have been indexed here far beyond the rescued range.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.metadata import MetadataClient
from broker.partitions import reads
from broker.partitions.dispatcher import CatchUp
from broker.partitions.partition_map import PartitionMap

log = logging.getLogger("mqindex.broker.index_rescue")

RESCUED_PREFIX = "index_rescued/"


def published_row(location: str, begin_ms: int, end_ms: int, min_ms: int | None,
                  ranges: dict[tuple[str, int], tuple[int, int]] | None = None) -> list[Any]:
    """An index file as the published-files format has it (broker/cluster/cluster_index.py): [location, the oldest
    store time it may hold (the earlier of its creation and its oldest entry), its newest store time], then, when
    known, its offset ranges [[topic, partition, lowest, highest], ...] (its retention follows them, see
    broker/cluster/published_expiry.py; readers of the first three fields read it as before)."""
    row: list[Any] = [location, begin_ms if min_ms is None else min(begin_ms, min_ms), end_ms]
    if ranges:
        row.append([[t, q, lo, hi] for (t, q), (lo, hi) in sorted(ranges.items())])
    return row


def rebuild(parts: PartitionMap, ranges: list[CatchUp], work_dir: Path, store: str | None, prefix: str,
            clock: Callable[[], int]) -> tuple[list[list[Any]], int]:
    """Index [start, end) of each range into a fresh index under `prefix`, upload every file; returns the
    uploaded files in the published-files format (`published_row`: the records rescued are old, so the oldest store
    time is far before the file's creation) and the entry count."""
    from index_service import IndexService

    shutil.rmtree(work_dir, ignore_errors=True)
    svc = IndexService.open(work_dir, store=store, remote_prefix=prefix, clock=clock, maintain_interval_s=0)
    entries = 0
    try:
        for c in ranges:
            for batch in reads.index_entries(parts, c.topic, c.partition, c.start, c.end, clock):
                svc.put_batch(batch)
                entries += len(batch)
        svc.flush()
        svc.roll()
        deadline = time.monotonic() + 120
        while True:
            svc.maintain()
            files = [f for f in svc.files() if f.items or f.state.value != "WRITING"]  # the roll opened an empty one
            if all(f.state.value == "UPLOADED" for f in files):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"rescued index files not uploaded: {[f.location for f in files]}")
            time.sleep(0.2)
        known = {loc: rs for loc, _state, rs in svc.offset_ranges()}
        out = [published_row(f.location, f.begin_ms, f.end_ms if f.end_ms is not None else f.begin_ms, f.min_ms,
                             known.get(f.location)) for f in files]
    finally:
        svc.close()
    shutil.rmtree(work_dir, ignore_errors=True)
    return out, entries


def publish_rescued(meta: MetadataClient, name: str, files: list[list[Any]], done_key: str) -> None:
    """Publish the rescued files, then delete the dead node's claims (`done_key`). Stopped in between, the
    rescue is done again later; the files published twice answer the same hits, merged away by the lookup."""
    meta.kv_put_many({f"{RESCUED_PREFIX}{name}": json.dumps(sorted(files, key=lambda x: x[0]))})
    meta.kv_delete(done_key)
