"""Appending a client's RecordBatch v2 bytes as sent, with idempotent-producer sequence checks.

A Kafka client (api/kafka) sends record batches it built itself, maybe compressed. They are checked without
decoding their records (`batch_check`: header, CRC-32C, record count and framing) and stored exactly as
sent with only the base offset patched (outside the CRC). Each record's index keys (key, `KEYS`,
`UNIQ_KEY`: records.index_keys, as for HTTP produce) are read off the acknowledgement path: the dispatcher
thread decodes the stored batch after the WAL fsync. A compressed batch is decompressed once before it is
stored (its record framing is inside the compressed payload) and its entries are taken from that decode.

Idempotence (a producer id >= 0): per partition and producer id the last five batches' sequences and base
offsets are kept, as Kafka does. A batch whose sequence range is one of them is a retry: it is answered with
the offset it got the first time and stored no second time, once that first append is durable (a retry that
arrives while the original is still in the WAL's queue waits for it, and fails if it fails). A batch whose
append failed is forgotten (the stream's offsets went back to its acknowledged end), so its retry is stored
as a new batch. Otherwise its base sequence must follow the
last one (or be 0 for a new epoch); any other sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, a lower epoch is
INVALID_PRODUCER_EPOCH. This state lives in memory and is rebuilt from the partition's stored batches on the
first idempotent append after a start or an ownership change (producer_state.py), so a batch stored before a
crash and retried after it is still recognised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError, Fenced, RecordFormatError
from broker.objects.format import RECORD_HEADER_SIZE
from broker.partitions.batch_check import CheckedBatch, check_batches, stored_copy
from broker.partitions.kafka_clients import producer_state, txn_partition
from broker.partitions.message_size import TopicLimits
from broker.partitions.partition import Partition
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import (
    KafkaBatch,
    Record,
    batch_slices,
    index_keys,
    parse_batches,
    parse_header,
    record_size,
    walk_records,
    with_base_offset,
)
from index_file import IndexEntry

try:
    from broker.partitions import _record_entries
except ImportError:  # not built: the records are decoded in Python (tests/broker checks CI builds it)
    _record_entries = None

log = logging.getLogger("mqindex.broker.client_batches")

KEEP_BATCHES = 5  # Kafka's max.in.flight for idempotence: the retries it can recognise


class SequenceError(BrokerError):
    """A batch refused by the idempotent-producer checks; `code` is Kafka's error name."""

    def __init__(self, code: str, detail: str) -> None:
        self.code = code
        super().__init__(detail)


class BatchTooLarge(BrokerError, ValueError):
    """A batch of a produce request is over its topic's max.message.bytes (message_size.py) or the largest WAL
    record; nothing of the request's batches for that partition is stored."""


@dataclass
class AppendResult:
    base_offset: int
    duplicate: bool = False


@dataclass
class Queued:
    """The WAL appends a partition's batches wait for, in WAL order: each new batch's, and for a retried batch
    whose first append is not durable yet, that append's. `futures` resolve once each is fsynced (an asyncio
    caller awaits them without a thread), then `check()` tells whether the node may still acknowledge."""

    futures: list[Future[Any]]
    check: Callable[[], None]
    #: the last append this request queued (None: only retried batches); later in the WAL than every other future
    appended: Future[Any] | None = None

    def wait(self) -> None:
        """Block until every new batch is fsynced (the error of the first that failed)."""
        for f in self.futures:
            f.result()
        self.check()

    def failure(self) -> str | None:
        """Without waiting: why the first of the appends failed, or that one is not fsynced yet (None when every
        one is). Whether the node may acknowledge is the caller's to ask (`check`), at the time it decides."""
        for f in self.futures:
            try:
                exc = f.exception(timeout=0)
            except TimeoutError:
                return "the append is not durable yet"
            if exc is not None:
                return str(exc)
        return None


_entry = tuple.__new__  # IndexEntry's own __new__ is a Python function: one frame per record saved


def _entries(topic: str, partition: int, base: int, records: Sequence[Record], first: int, now: int
             ) -> list[IndexEntry]:
    out = []
    shift = base - first
    for r in records:
        keys = index_keys(r)
        if keys:
            out.append(_entry(IndexEntry, (topic, partition, shift + r.offset, record_size(r), now, keys)))
    return out


def stored_entries(topic: str, partition: int, base: int, payload: bytes, now: int) -> list[IndexEntry]:
    """The index entries of a stored batch (run by the dispatcher thread, after the acknowledgement). A batch
    whose records cannot be decoded (its CRC and framing were checked, so the client built it so) is logged,
    naming the partition and offset, and indexes nothing; the dispatcher goes on."""
    try:
        if _record_entries is None:
            return [e for b in parse_batches(payload, check_crc=False) if not b.header.is_control
                    for e in _entries(topic, partition, base, b.records, b.header.base_offset, now)]
        return [e for pos, h, raw in batch_slices(payload) if not h.is_control
                for e in walk_records(_record_entries.record_entries, raw, h, pos, topic, partition, base, now)]
    except RecordFormatError as exc:
        log.error("stored batch not indexed: its records do not decode",
                  extra={"topic": topic, "partition": partition, "offset": base, "error": str(exc)})
        return []


class ClientBatches:
    def __init__(self, parts: PartitionMap, max_body: int,
                 dispatch: Callable[[list[IndexEntry] | Callable[[], list[IndexEntry]]], None],
                 clock: Callable[[], int], limits: TopicLimits | None = None) -> None:
        self.parts = parts
        self.max_body = max_body
        #: each topic's max.message.bytes: a batch over it is refused before anything is decoded or queued
        self.limits = limits or TopicLimits(parts.meta)
        self.dispatch = dispatch  # entries, or a function that gives them (run off the acknowledgement path)
        #: whether stream records carry their append time (magic 0x23): not while a node of a release that cannot
        #: read them is live (a rolling upgrade; the node sets it from its membership)
        self.timed_records: Callable[[], bool] = lambda: True
        self.clock = clock
        self._producers: dict[tuple[str, int, int], producer_state.ProducerState] = {}
        self._restored: dict[tuple[str, int], int] = {}  # partition -> ownership epoch its state was rebuilt at
        self.txns = txn_partition.TxnPartitions(parts)  # open and aborted transactions, the LSO

    @staticmethod
    def parse(data: bytes) -> list[KafkaBatch]:
        """Every batch of a client's records field, CRC-checked and decompressed (RecordFormatError if not)."""
        check_batches(data)
        return list(parse_batches(data))

    def _check_sequence(self, key: tuple[str, int, int], b: CheckedBatch
                        ) -> tuple[int, Future[Any] | None] | None:
        """For a retried batch, the base offset it got and its first append's future (None once read back from
        the log); None for a new batch in sequence; SequenceError otherwise."""
        first, last = b.first_sequence, b.last_sequence
        st = self._producers.get(key)
        if st is not None:
            st.forget_failed()
        if st is None or b.producer_epoch > st.epoch:
            if st is not None and first != 0:
                raise SequenceError("OUT_OF_ORDER_SEQUENCE_NUMBER",
                                    f"producer {b.producer_id} epoch {b.producer_epoch} starts at sequence {first}")
            return None
        if b.producer_epoch < st.epoch:
            raise SequenceError("INVALID_PRODUCER_EPOCH",
                                f"producer {b.producer_id} epoch {b.producer_epoch} is older than {st.epoch}")
        for f, lst, base, appended in st.batches:
            if f == first and lst == last:
                return base, appended
        expected = st.expected
        if first != expected:
            raise SequenceError("OUT_OF_ORDER_SEQUENCE_NUMBER",
                                f"producer {b.producer_id}: sequence {first}, expected {expected}")
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

    def may_block(self, part: Partition, data: bytes | memoryview) -> bool:
        """Whether `append` could wait (log-cache back-pressure, rebuilding the partition's producer state from
        its log on the first idempotent append) or run long (decompressing a batch): an event loop then runs
        it on a worker thread, and otherwise in line (it only checks, copies and queues)."""
        storage = self.parts.storage
        if storage.cache.size > storage.max_cache_bytes:
            return True
        restored = self._restored.get((part.topic.name, part.index)) == part.epoch
        pos = 0
        try:
            while pos < len(data):
                h = parse_header(data, pos)
                if h.attributes & 0x07 or (not restored and h.producer_id >= 0):
                    return True
                if h.attributes & txn_partition.TRANSACTIONAL and self.txns.known(part) is None:
                    return True
                pos += h.size
        except RecordFormatError:
            pass  # refused by append's checks before anything could wait
        return False

    def append(self, part: Partition, data: bytes) -> tuple[list[AppendResult], Queued]:
        """Queue the batches of `data` on the partition's data stream. Returns each batch's result and the
        queued appends (`Queued`: their futures, or wait() that returns once every new batch is fsynced in
        the WAL). All or nothing: a batch refused by the checks refuses the request before anything is
        queued; a batch over the topic's max.message.bytes is BatchTooLarge."""
        topic = part.topic.name
        batches = check_batches(data)
        if any(b.attributes & txn_partition.CONTROL for b in batches):
            raise RecordFormatError("control batches (transaction markers) are written by the broker, not sent")
        limit = self.limits.of(topic)
        for b in batches:  # b.size: the batch as sent, with its 12 bytes of log overhead, as Kafka counts it
            if b.size > limit.bytes:
                raise BatchTooLarge(limit.batch_refusal(topic, part.index, b.size))
        txns = self.txns.of(part) if any(b.attributes & txn_partition.TRANSACTIONAL for b in batches) else None
        decoded: dict[int, KafkaBatch] = {}
        for i, b in enumerate(batches):
            if b.needs_decode:  # compressed: its framing is only visible decompressed
                decoded[i] = next(parse_batches(memoryview(data)[b.start:b.start + b.size]))
        total = sum(b.size + RECORD_HEADER_SIZE for b in batches)
        biggest = max(b.size for b in batches)
        if biggest + RECORD_HEADER_SIZE > self.max_body:
            raise BatchTooLarge(f"the record batch of {biggest} bytes for topic {topic!r} partition {part.index} is "
                                f"over the largest the WAL stores, {self.max_body - RECORD_HEADER_SIZE} bytes, "
                                "whatever max.message.bytes allows")
        storage = self.parts.storage
        storage.wait_for_cache_room()
        storage.check_room(total, len(batches))
        now = self.clock()
        results: list[AppendResult] = []
        futures = []
        last_new: Future[Any] | None = None
        with part.lock:
            data_stream = part.data
            if not part.owned or data_stream is None:
                raise self.parts.not_served(part)
            if any(b.producer_id >= 0 for b in batches):
                self._restore(part)
            if txns is None:
                txns = self.txns.known(part)
            dup: list[tuple[int, Future[Any] | None] | None] = []
            for b in batches:  # every check before anything is queued
                key = (topic, part.index, b.producer_id)
                dup.append(self._check_sequence(key, b) if b.producer_id >= 0 else None)
            for i, (b, seen) in enumerate(zip(batches, dup, strict=True)):
                if seen is not None:
                    first_base, first_append = seen
                    if first_append is not None and not first_append.done() and first_append not in futures:
                        futures.append(first_append)  # queued by an earlier request: earlier in the WAL
                    results.append(AppendResult(first_base, duplicate=True))
                    continue
                base = data_stream.next_offset
                payload = stored_copy(data, b, base)
                if i in decoded:
                    kb = decoded[i]
                    ready = _entries(topic, part.index, base, kb.records, kb.header.base_offset, now)
                    on_durable = (lambda rec, e=ready: self.dispatch(e)) if ready else None
                else:
                    def on_durable(rec: object, base: int = base, payload: bytes = payload) -> None:
                        self.dispatch(lambda: stored_entries(topic, part.index, base, payload, now))
                try:
                    appended = data_stream.append(payload, b.last_offset_delta + 1, base, on_durable,
                                                 now if self.timed_records() else None)
                except Fenced:
                    raise self.parts.not_served(part) from None
                futures.append(appended)
                last_new = appended
                if txns is not None and b.attributes & txn_partition.TRANSACTIONAL:
                    txns.on_batch(b.attributes, b.producer_id, base)
                    appended.add_done_callback(lambda f: f.exception() is not None and self.txns.forget(part))
                if b.producer_id >= 0:
                    key = (topic, part.index, b.producer_id)
                    st = self._producers.get(key) or producer_state.ProducerState(b.producer_epoch, KEEP_BATCHES)
                    self._producers[key] = st.add(b.producer_epoch, b.first_sequence, b.last_sequence, base,
                                                  appended)
                results.append(AppendResult(base))

        return results, Queued(futures, storage.check_usable, last_new)

    def append_marker(self, part: Partition, producer_id: int, epoch: int, commit: bool, seq: int = 0
                      ) -> Future[Any]:
        """Queue a transaction's commit or abort marker (a control batch) on the partition; the future resolves
        once it is durable. The partition's transaction state (open transactions, aborted ones, the LSO) follows
        the marker only once it is durable: a marker whose append fails changes nothing, and the coordinator
        writes it again. The producer's epoch on this partition becomes at least `epoch` at once, so that a
        batch of a fenced incarnation is refused (INVALID_PRODUCER_EPOCH): the coordinator fenced it already.
        `seq` is the coordinator's number of the transaction (txn_partition's module doc): when a durable marker
        of that number (or a later one) of the producer is here already, nothing is written (done at once)."""
        txns = self.txns.of(part)
        marker = txn_partition.marker_batch(producer_id, epoch, commit, seq, now_ms=self.clock())
        if txns.has_marker(producer_id, seq):
            written: Future[Any] = Future()
            written.set_result(None)
            return written
        with part.lock:
            data_stream = part.data
            if not part.owned or data_stream is None:
                raise self.parts.not_served(part)
            self._restore(part)
            base = data_stream.next_offset
            try:
                appended = data_stream.append(with_base_offset(marker, base), 1, base, None)
            except Fenced:
                raise self.parts.not_served(part) from None
            key = (part.topic.name, part.index, producer_id)
            st = self._producers.get(key)
            if st is None or st.epoch < epoch:
                self._producers[key] = producer_state.ProducerState(epoch, KEEP_BATCHES)
        done: Future[Any] = Future()

        def durable(f: Future[Any]) -> None:
            exc = f.exception()
            if exc is not None:
                log.warning("transaction marker not stored", extra={"partition": part.name, "offset": base,
                                                                     "producer_id": producer_id, "error": str(exc)})
                done.set_exception(exc)
                return
            txns.on_batch(txn_partition.CONTROL | txn_partition.TRANSACTIONAL, producer_id, base, commit, seq)
            done.set_result(f.result())

        appended.add_done_callback(durable)
        return done
