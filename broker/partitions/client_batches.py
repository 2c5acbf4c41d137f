"""Appending a client's RecordBatch v2 bytes as sent, with idempotent-producer sequence checks.

A Kafka client (api/kafka) sends record batches it built itself, maybe compressed. They are stored exactly
as sent with only the base offset patched (outside the CRC); they are decompressed only to list each
record's index keys (key, `KEYS`, `UNIQ_KEY`: records.index_keys, as for HTTP produce).

Idempotence (a producer id >= 0): per partition and producer id the last five batches' sequences and base
offsets are kept, as Kafka does. A batch whose sequence range is one of them is a retry: it is answered with
the offset it got the first time and stored no second time. Otherwise its base sequence must follow the
last one (or be 0 for a new epoch); any other sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, a lower epoch is
INVALID_PRODUCER_EPOCH. This state lives in memory and is rebuilt from the partition's stored batches on the
first idempotent append after a start or an ownership change (producer_state.py), so a batch stored before a
crash and retried after it is still recognised.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.errors import BrokerError, Fenced, RecordFormatError
from broker.objects.format import RECORD_HEADER_SIZE
from broker.partitions import producer_state
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import KafkaBatch, index_keys, parse_batches, with_base_offset
from index_file import IndexEntry

KEEP_BATCHES = 5  # Kafka's max.in.flight for idempotence: the retries it can recognise


class SequenceError(BrokerError):
    """A batch refused by the idempotent-producer checks; `code` is Kafka's error name."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        super().__init__(detail)


class BatchTooLarge(BrokerError, ValueError):
    """A produce request's batches for one partition exceed the largest WAL record."""


@dataclass
class _ProducerState:
    epoch: int
    # (first sequence, last sequence, base offset) of the last batches, oldest first
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=KEEP_BATCHES))


@dataclass
class AppendResult:
    base_offset: int
    duplicate: bool = False


class ClientBatches:
    def __init__(self, parts: PartitionMap, max_body: int, dispatch: Callable[[list[IndexEntry]], None],
                 clock: Callable[[], int]) -> None:
        self.parts = parts
        self.max_body = max_body
        self.dispatch = dispatch
        self.clock = clock
        self._producers: dict[tuple[str, int, int], _ProducerState | producer_state.ProducerState] = {}
        self._restored: dict[tuple[str, int], int] = {}  # partition -> ownership epoch its state was rebuilt at

    @staticmethod
    def parse(data: bytes) -> list[KafkaBatch]:
        """Every batch of a client's records field, CRC-checked and decompressed (RecordFormatError if not)."""
        batches = list(parse_batches(data))
        if not batches:
            raise RecordFormatError("no record batch in the request")
        for b in batches:
            if b.header.is_transactional or b.header.is_control:
                raise RecordFormatError("transactional and control batches are not supported")
            if b.header.records_count != b.header.last_offset_delta + 1:
                raise RecordFormatError(f"batch of {b.header.records_count} records has last offset delta "
                                        f"{b.header.last_offset_delta}")
        return batches

    def _check_sequence(self, key: tuple[str, int, int], b: KafkaBatch) -> int | None:
        """The base offset a retried batch got, None for a new batch in sequence; SequenceError otherwise."""
        h = b.header
        first, last = h.base_sequence, h.base_sequence + h.last_offset_delta
        st = self._producers.get(key)
        if st is None or h.producer_epoch > st.epoch:
            if st is not None and first != 0:
                raise SequenceError("OUT_OF_ORDER_SEQUENCE_NUMBER",
                                    f"producer {h.producer_id} epoch {h.producer_epoch} starts at sequence {first}")
            return None
        if h.producer_epoch < st.epoch:
            raise SequenceError("INVALID_PRODUCER_EPOCH",
                                f"producer {h.producer_id} epoch {h.producer_epoch} is older than {st.epoch}")
        for f, lst, base in st.batches:
            if f == first and lst == last:
                return base
        expected = st.batches[-1][1] + 1 if st.batches else 0
        if first != expected:
            raise SequenceError("OUT_OF_ORDER_SEQUENCE_NUMBER",
                                f"producer {h.producer_id}: sequence {first}, expected {expected}")
        return None

    def _restore(self, part: Partition) -> None:
        """On the first idempotent append at this ownership epoch, the partition's producers from its log."""
        mark = (part.topic.name, part.index)
        if self._restored.get(mark) == part.epoch:
            return
        for key in [k for k in self._producers if k[:2] == mark]:
            del self._producers[key]
        for pid, st in producer_state.rebuild(self.parts, part, KEEP_BATCHES).items():
            self._producers[(*mark, pid)] = st
        self._restored[mark] = part.epoch

    def append(self, part: Partition, data: bytes) -> tuple[list[AppendResult], Callable[[], None]]:
        """Queue the batches of `data` on the partition's data stream. Returns each batch's result and a
        wait() that returns once every new batch is fsynced in the WAL. All or nothing: a batch refused by
        the checks refuses the request before anything is queued."""
        topic = part.topic.name
        batches = self.parse(data)
        total = sum(len(b.raw) + RECORD_HEADER_SIZE for b in batches)
        if max(len(b.raw) for b in batches) + RECORD_HEADER_SIZE > self.max_body:
            raise BatchTooLarge(f"a batch for {part.name} exceeds the {self.max_body}-byte limit")
        storage = self.parts.storage
        storage.wait_for_cache_room()
        storage.check_room(total, len(batches))
        now = self.clock()
        results: list[AppendResult] = []
        futures = []
        with part.lock:
            data_stream = part.data
            if not part.owned or data_stream is None:
                raise self.parts.not_served(part)
            if any(b.header.producer_id >= 0 for b in batches):
                self._restore(part)
            dup: list[int | None] = []
            for b in batches:  # every check before anything is queued
                key = (topic, part.index, b.header.producer_id)
                dup.append(self._check_sequence(key, b) if b.header.producer_id >= 0 else None)
            for b, seen in zip(batches, dup, strict=True):
                if seen is not None:
                    results.append(AppendResult(seen, duplicate=True))
                    continue
                h = b.header
                base = data_stream.next_offset
                entries = []
                for r in b.records:
                    keys = index_keys(r)
                    if keys:
                        size = len(r.key or b"") + len(r.value or b"") + sum(len(k) + len(v or b"")
                                                                         for k, v in r.headers)
                        entries.append(IndexEntry(topic, part.index, base + r.offset - h.base_offset, size, now,
                                                  keys))
                try:
                    futures.append(data_stream.append(with_base_offset(b.raw, base), h.last_offset_delta + 1, base,
                                                      (lambda rec, e=entries: self.dispatch(e)) if entries else None))
                except Fenced:
                    raise self.parts.not_served(part) from None
                if h.producer_id >= 0:
                    key = (topic, part.index, h.producer_id)
                    st = self._producers.get(key)
                    if st is None or h.producer_epoch > st.epoch:
                        st = self._producers[key] = _ProducerState(h.producer_epoch)
                    st.batches.append((h.base_sequence, h.base_sequence + h.last_offset_delta, base))
                results.append(AppendResult(base))

        def wait() -> None:
            for f in futures:
                f.result()
            storage.check_usable()

        return results, wait
