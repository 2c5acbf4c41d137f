"""The link from the partitions to the node's IndexService: open it with the broker's wiring, and the
catch-up ranges the dispatcher re-dispatches at open (from each partition's index checkpoint + 1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.partitions import reads
from broker.partitions.dispatcher import CatchUp, Dispatcher, progress_marker
from broker.partitions.index_claims import IndexClaims
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.retention import data_is_live
from index_file import IndexEntry


def open_index(index_dir: Path, store_url: str, node_id: int, clock: Callable[[], int], parts: PartitionMap,
               index_config: dict[str, Any]) -> tuple[Any, Dispatcher]:
    """The node's IndexService and the Dispatcher feeding it (not started)."""
    from index_service import IndexService

    config = dict(index_config)
    index_store = config.pop("store", store_url)
    # each node's index files under their own prefix: an index service sweeps unclaimed objects under its
    # prefix, so nodes sharing a store must never share one
    config.setdefault("remote_prefix", f"index-node-{node_id}/")
    config.setdefault("clock", clock)
    # the index follows the data: a file expires once the broker has trimmed every range in it
    config.setdefault("is_live", lambda t, q, off: data_is_live(parts, t, q, off))
    index = IndexService.open(index_dir, store=index_store, **config)
    parts.checkpoint = index.checkpoint
    # every partition's entries are claimed in the metadata before they reach the index, so a survivor of
    # this node knows what to rebuild if it dies with entries not uploaded
    claims = IndexClaims(parts.meta, node_id)
    parts.index_claims = claims
    dispatcher = Dispatcher(claims.guard(index.put_batch), lambda c: reads.index_entries(
        parts, c.topic, c.partition, c.start, c.end, clock), index.flush, mark=index.put_batch)
    parts.forget_index = lambda topic, partitions: dispatcher.in_order(lambda: index.forget_queues(topic, partitions))
    return index, dispatcher


def catch_up_ranges(parts: PartitionMap) -> list[CatchUp]:
    """For each partition led here: the acknowledged offsets after the index's checkpoint."""
    out = []
    for p in parts.owned():
        ck = parts.index_checkpoint(p)
        start = max(0 if ck is None else ck + 1, parts.start_offset(p))
        out.append(CatchUp(p.topic.name, p.index, start, p.acked_end))
    return out


def keyless_ends(parts: PartitionMap, owned: list[Partition]) -> list[IndexEntry]:
    """Progress markers for the partitions whose index checkpoint stops short of their acknowledged end (their
    last records have no keys), given at a clean close once every acknowledged record is dispatched."""
    out = []
    for p in owned:
        ck = parts.checkpoint(p.topic.name, p.index)
        if p.acked_end > 0 and (ck is None or ck < p.acked_end - 1):
            out.append(progress_marker(p.topic.name, p.index, p.acked_end - 1))
    return out
