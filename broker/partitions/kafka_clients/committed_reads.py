"""A page of a partition as a read_committed reader sees it, for the HTTP fetch (`isolation=read_committed`):
the page stops at the first transaction that has no marker yet (the last stable offset as this node reads the
partition), and the batches of aborted transactions are left out, as markers always are. Records outside
transactions are returned as by a plain fetch (read_uncommitted, the default): the same rendering, the same
next offset rule, the same damage rule (broker/partitions/reads.py)."""

from __future__ import annotations

from bisect import bisect_right

from broker.partitions import reads
from broker.partitions.damage import BatchTaker
from broker.partitions.kafka_clients import txn_partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import BatchHeader


def fetch_rendered(parts: PartitionMap, topic: str, partition: int, offset: int, max_count: int,
                   renderer: reads.Renderer) -> tuple[list[reads.Rendered], int]:
    """`reads.fetch_rendered` for a read_committed reader (module doc). A page that starts at an open
    transaction is empty and its next offset is `offset` again: ask later."""
    info = parts.topic(topic)
    p = parts.partition(info, partition)
    hidden: list[tuple[int, int]] = []
    cap = None
    if isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0 and max_count >= 1:
        start, end = parts.bounds(p)
        pos = max(offset, start)
        if pos < end:
            cap, hidden = txn_partition.committed_view(parts, p, pos, min(end, pos + max_count))
            if cap <= pos:
                return [], offset
            max_count = min(max_count, cap - pos)
            renderer = _skipping(renderer, hidden)
    served, next_offset = reads.fetch_rendered(parts, topic, partition, offset, max_count, renderer)
    for first, after in hidden:  # the skipped batches right after the page: the next page starts past them
        if cap is not None and first <= next_offset < after:
            next_offset = min(after, cap)
    return served, next_offset


def _skipping(renderer: reads.Renderer, hidden: list[tuple[int, int]]) -> reads.Renderer:
    """`renderer` that renders nothing of the batches starting in a hidden range."""
    if not hidden:
        return renderer
    firsts = [first for first, _next in hidden]

    def make(topic: str, topic_id: int, partition: int, start: int, end: int) -> BatchTaker[reads.Rendered]:
        take = renderer(topic, topic_id, partition, start, end)

        def skip_hidden(h: BatchHeader, raw: bytes, pos: int) -> list[reads.Rendered]:
            i = bisect_right(firsts, h.base_offset) - 1
            if i >= 0 and hidden[i][0] <= h.base_offset < hidden[i][1]:
                return []
            return take(h, raw, pos)

        return skip_hidden

    return make
