"""Idempotent producers' state of a partition rebuilt from its log, so that it survives restarts and moves.

The stored batches are the source of truth, as in Kafka: each keeps the producer id, epoch and base sequence its
client gave it, and its base offset. When a node first appends a client's batch to a partition it owns (after a
start, a failover or a move, when it has no state for that partition), it reads the headers of the partition's
last `WINDOW_RECORDS` records and keeps, per producer id, the newest epoch and the last KEEP batches'
(first sequence, last sequence, base offset). A batch stored before a kill -9 and retried after the restart is
then recognised as a retry. Only batch headers are read (no decompression).

The window bounds the read on the produce path: a producer whose last batch lies further back than that is
unknown after a restart, and its next batch is accepted as it comes (as for a new producer).

A batch appended on this node keeps its append's future beside its sequences until the state forgets it: a retry
of a batch not yet durable is answered once its original is (not before), and a batch whose append failed is
forgotten, so its retry is stored as a new batch rather than answered with offsets that were rolled back.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from broker.errors import OffsetOutOfRange
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import parse_header

WINDOW_RECORDS = 100_000
READ_BYTES = 4 << 20


# (first sequence, last sequence, base offset, the append's future: None once read back from the log)
Batch = tuple[int, int, int, "Future[Any] | None"]


def _failed(f: Future[Any] | None) -> bool:
    return f is not None and f.done() and f.exception() is not None


@dataclass
class ProducerState:
    epoch: int
    keep: int
    batches: deque[Batch] = field(default_factory=deque)  # the last batches, oldest first
    # the sequence expected next when no batch is kept: the first of the failed batches forgotten last
    resume_at: int = 0

    def __post_init__(self) -> None:
        self.batches = deque(self.batches, maxlen=self.keep)

    def add(self, epoch: int, first: int, last: int, base: int, appended: Future[Any] | None = None
            ) -> ProducerState:
        """This state after a batch of `epoch` (a newer epoch starts afresh); returns the state to keep."""
        st = self if epoch <= self.epoch else ProducerState(epoch, self.keep)
        st.batches.append((first, last, base, appended))
        return st

    def forget_failed(self) -> None:
        """Forget the newest batches whose appends failed. They are always the newest: a failed WAL append fails
        every append queued behind it, and the stream's next offset goes back to its acknowledged end."""
        while self.batches and _failed(self.batches[-1][3]):
            self.resume_at = self.batches.pop()[0]

    @property
    def expected(self) -> int:
        """The base sequence the producer's next new batch must have."""
        return self.batches[-1][1] + 1 if self.batches else self.resume_at


def rebuild(parts: PartitionMap, p: Partition, keep: int, window: int = WINDOW_RECORDS) -> dict[int, ProducerState]:
    """producer id -> state, from the headers of the last `window` acknowledged records of `p`. The caller
    holds `p.lock` (nothing is appended meanwhile)."""
    end = p.acked_end
    pos = max(parts.start_offset(p), end - window)
    out: dict[int, ProducerState] = {}
    while pos < end:
        moved = False
        try:
            for rec in parts.storage.read(p.data_stream, pos, end, READ_BYTES):
                h = parse_header(rec.payload)
                if h.producer_id >= 0 and not h.is_control:  # a transaction's marker carries no sequence
                    st = out.get(h.producer_id) or ProducerState(h.producer_epoch, keep)
                    if h.producer_epoch >= st.epoch:
                        out[h.producer_id] = st.add(h.producer_epoch, h.base_sequence,
                                                    h.base_sequence + h.last_offset_delta, h.base_offset)
                if h.next_offset > pos:
                    pos, moved = h.next_offset, True
        except OffsetOutOfRange:  # trimmed by retention meanwhile: go on from the new start
            start = parts.start_offset(p)
            moved, pos = start > pos, max(pos, start)
        if not moved:
            break
    return out
