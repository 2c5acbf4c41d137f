"""Offsets by timestamp for Kafka clients (ListOffsets), on a real BrokerNode (SeaweedFS objects, SQLite
metadata) whose records were uploaded, so that a read fetches them from the object store: the scan for a
timestamp holds one read at a time, not the partition (it stops at the first match; the scan for the largest
timestamp goes to the end a chunk at a time), and a retention trim while it runs makes it go on from the new
start instead of failing."""

from __future__ import annotations

import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.partitions.kafka_clients.client_reads import offset_for_time, offset_of_max_timestamp
from broker.partitions.partition import Partition

VALUE = 64 << 10
RECORDS = 384  # 24 MiB of values in the partition
BASE_TS = 1_700_000_000_000
TOP_TS = BASE_TS + 10_000_000  # the largest timestamp, at offsets 100 and 300
MEMORY_BOUND = 8 << 20  # what a scan may hold: a third of the partition


def ts(i: int) -> int:
    return TOP_TS if i in (100, 300) else BASE_TS + 10 * i


@pytest.fixture
def node(seaweedfs, tmp_path: Path) -> Iterator[BrokerNode]:  # type: ignore[no-untyped-def]
    n = BrokerNode.open(tmp_path / "node", seaweedfs.store_url("mqindex", f"reads-{uuid.uuid4().hex[:8]}"),
                        f"sqlite:///{tmp_path}/meta.sqlite", upload_interval_s=3600, block_cache_bytes=2 << 20)
    try:
        yield n
    finally:
        n.close()


def uploaded_partition(node: BrokerNode, records: int) -> Partition:
    """A one-partition topic of `records` records of VALUE bytes (timestamps ts(i)), uploaded to objects."""
    node.create_topic("times", 1)
    for first in range(0, records, 16):
        node.produce("times", [InMessage(bytes([i % 251]) * VALUE, partition=0, timestamp=ts(i))
                               for i in range(first, min(first + 16, records))])
    node.flush()
    parts = node.partitions
    return parts.partition(parts.topic("times"), 0)


def peak_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """fn()'s result and the most memory allocated at once while it ran (every thread)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_scans_by_timestamp_hold_a_read_at_a_time(node: BrokerNode) -> None:
    p = uploaded_partition(node, RECORDS)
    parts = node.partitions
    assert parts.storage.cached_bytes(p.data_stream) == 0  # read from the objects

    # the first record at or after a time near the start: found, reading no further than its chunk
    got, peak = peak_bytes(lambda: offset_for_time(parts, p, ts(3)))
    assert got == (3, ts(3))
    assert peak < MEMORY_BOUND, f"{peak} bytes held to find offset 3 of {RECORDS * VALUE}"
    assert offset_for_time(parts, p, ts(101)) == (100, TOP_TS)  # timestamps are not in offset order
    assert offset_for_time(parts, p, TOP_TS + 1) == (-1, -1)

    # the largest timestamp (ListOffsets MAX_TIMESTAMP): the first record holding it, the whole partition read
    # a chunk at a time
    got, peak = peak_bytes(lambda: offset_of_max_timestamp(parts, p))
    assert got == (100, TOP_TS)
    assert peak < MEMORY_BOUND, f"{peak} bytes held to scan {RECORDS * VALUE}"


class TrimmedOnFirstRead:
    """The node's own storage, whose first read is preceded by a real retention trim of the partition in the
    metadata: a retention pass running between the lookup taking the partition's bounds and reading it."""

    def __init__(self, storage: Any, trim: Callable[[], None]) -> None:
        self._storage, self._trim, self.reads = storage, trim, 0

    def read(self, *args: Any, **kw: Any) -> Any:
        self.reads += 1
        if self.reads == 1:
            self._trim()
        return self._storage.read(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


@pytest.mark.parametrize("lookup", ["time", "max"])
def test_a_trim_while_scanning_goes_on_from_the_new_start(node: BrokerNode, monkeypatch: pytest.MonkeyPatch,
                                                          lookup: str) -> None:
    p = uploaded_partition(node, 40)
    parts = node.partitions
    assert p.data is not None
    data = p.data
    storage = TrimmedOnFirstRead(parts.storage, lambda: data.trim(15))
    monkeypatch.setattr(parts, "storage", storage)
    if lookup == "time":  # the first record at or after the time of offset 0 is gone: the first one kept
        assert offset_for_time(parts, p, ts(0)) == (15, ts(15))
    else:
        assert offset_of_max_timestamp(parts, p) == (39, ts(39))
    assert storage.reads == 2  # refused below the new start, then read from it
    assert parts.start_offset(p) == 15
