"""Partition: one Kafka partition served by this node, made of two streams.

The data stream holds the partition's Kafka record batches at their Kafka offsets (stream offset = Kafka
offset). The meta stream holds PartitionState records (the last one wins, see partition_state.py).
While this node leads the partition both streams are open here at the partition's epoch (`owned`);
otherwise `meta`/`data` are None and `why_not_owned` says why.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from broker.partitions.partition_state import PartitionState
from broker.partitions.topics import TopicInfo
from broker.streams import Stream


@dataclass(eq=False)
class Partition:
    topic: TopicInfo
    index: int
    meta_stream: int
    data_stream: int
    lock: threading.Lock = field(default_factory=threading.Lock)  # orders appends to the data stream
    owned: bool = False
    epoch: int = -1
    meta: Stream | None = None
    data: Stream | None = None
    state: PartitionState = field(default_factory=PartitionState)
    state_offset: int | None = None  # meta stream offset of the newest state record
    why_not_owned: str = "not opened"

    @property
    def name(self) -> str:
        return f"{self.topic.name}-{self.index}"

    @property
    def acked_end(self) -> int:
        """Offsets below are acknowledged (in the log cache or in objects)."""
        return self.data.confirmed_end if self.data is not None else 0

    @property
    def streams(self) -> list[Stream]:
        return [s for s in (self.meta, self.data) if s is not None]

    def load_state(self) -> bool:
        """Read the newest state record of the meta stream; False when it says the last owner crashed."""
        assert self.meta is not None and self.data is not None
        start, end = self.meta.start_offset, self.meta.next_offset
        last = None
        if end > start:
            for rec in self.meta.fetch(max(start, end - 1), end):
                last = rec
        clean = True
        if last is not None:
            self.state = PartitionState.decode(last.payload)
            self.state_offset = last.base_offset
            clean = self.state.clean_shutdown
        self.state = PartitionState(self.data.start_offset, self.state.clean_shutdown, self.state.index_checkpoint,
                                    self.state.node_id, self.state.epoch, self.state.at_ms)
        return clean

    def write_state(self, state: PartitionState) -> Future[Any]:
        """Append a state record to the meta stream (durable when the future resolves)."""
        assert self.meta is not None
        with self.lock:
            self.state = state
            base = self.meta.next_offset
            self.state_offset = base
            return self.meta.append(state.encode(), 1, base)

    def trim_meta(self) -> None:
        """Drop meta stream records older than the newest state record."""
        if self.meta is None or self.state_offset is None:
            return
        if self.meta.start_offset < self.state_offset < self.meta.committed_end:
            self.meta.trim(self.state_offset)
