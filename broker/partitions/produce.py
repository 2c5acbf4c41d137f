"""The produce path: validate -> route to partitions -> one Kafka RecordBatch v2 per partition -> append.

Two times: each record keeps the producer's timestamp (or the append time when it gives none), and
every index entry carries the broker's append time (`clock`), so a skewed producer clock or a backfill of
old timestamps neither scatters the index files nor changes what a begin/end key query covers. The append
time is stored with the batch's stream record (WAL and objects), so a re-dispatch after a crash or a
failover, a rescue and a Spark build index the records at the same time (docs/INDEX_SERVICE.md).

Each message's value is held to its topic's max.message.bytes before anything is queued (message_size.py says
why values and not the batch). Each partition's batch is built, its offsets assigned under the partition lock
and its stream record queued on the WAL in the same critical section (so the WAL holds every partition's
batches in offset order). When the WAL's group commit has fsynced it, the record is in the log cache and the
batch's index entries (every record's key, KEYS and UNIQ_KEY) go to the dispatcher; `produce` returns after
that for every partition of the request.

An acknowledgement is a promise, and a request over several partitions is stored whole or not at all:
- the request's room in the WAL's data path is reserved at once (DiskSpace.reserve): the disk filling between
  that check and the appends refuses no partition's append after another's was queued;
- every partition's stream lock is held across the check that none is fenced and the queueing of every
  batch (Stream.append_lock): a fence of the node waits until the whole request is queued, or comes first and
  refuses it whole, and a request whose stream was fenced once queued is refused, not acknowledged;
- before answering, a catch-up of the metadata begun after the records were durable (FreshMetadata) shows
  whether another node deleted the topic meanwhile: then the request is refused (the deletion drops its
  records), never acknowledged and then dropped. When that read fails (the metadata database does not
  answer), the answer follows this node's cached view, as before: an error for stored records would have
  the client send them twice, and the node's lease stops its acknowledgements if the outage lasts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from broker.errors import Fenced, InvalidField, LeaseLapsed
from broker.objects.format import RECORD_HEADER_SIZE
from broker.partitions.client_messages import InMessage, Produced
from broker.partitions.fresh_metadata import FreshMetadata
from broker.partitions.message_id import encode_message_id
from broker.partitions.message_size import TopicLimits, check_values
from broker.partitions.partition_map import PartitionMap, now_ms
from broker.partitions.partitioner import RoundRobin, partition_for_key
from broker.partitions.records import encode_batch, index_keys, record_size, with_base_offset
from broker.partitions.topic_errors import TopicNotFound
from broker.partitions.topics import TopicInfo
from broker.streams.wal import HEADER_SIZE as WAL_HEADER_SIZE
from index_file import IndexEntry

log = logging.getLogger("mqindex.broker.partitions")

_new = tuple.__new__  # a named tuple made without its Python-level __new__ (one per produced message)

_compiled: Any
try:
    from broker.partitions import _produce_route as _compiled  # built by pip install (setup.py); optional
except ImportError:  # not built: every message goes the Python way (tests/broker checks CI builds it)
    _compiled = None


def validate_message(i: int, m: object) -> None:
    if type(m) is InMessage and not m.headers and m.timestamp is None and (m.value is None or type(m.value) is bytes) \
            and (m.key is None or type(m.key) is bytes):
        return  # the common message (bytes or null value and key, no headers, no timestamp), checked at once
    if not isinstance(m, InMessage):
        raise InvalidField(f"messages.{i}", f"must be an InMessage, got {type(m).__name__}")
    for name, v in (("value", m.value), ("key", m.key)):
        if v is not None and not isinstance(v, bytes):
            raise InvalidField(f"messages.{i}.{name}", "must be bytes or null")
    t = m.timestamp
    if t is not None and (isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 1 << 63):
        raise InvalidField(f"messages.{i}.timestamp", f"must be milliseconds in [0, 2**63), got {t!r}")
    for h in m.headers:
        if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str) and (h[1] is None
                                                                                   or isinstance(h[1], bytes))):
            raise InvalidField(f"messages.{i}.headers", "must be (name, bytes or None) pairs")


class Producer:
    def __init__(self, parts: PartitionMap, max_body: int, dispatch: Callable[[list[IndexEntry]], None],
                 clock: Callable[[], int] = now_ms, limits: TopicLimits | None = None) -> None:
        self.parts = parts
        self.clock = clock  # the broker's append time (ms); tests inject one
        self.max_body = max_body  # largest WAL record body
        #: each topic's max.message.bytes, which bounds every message's value here (message_size.py says why)
        self.limits = limits or TopicLimits(parts.meta)
        self.dispatch = dispatch
        self.round_robin = RoundRobin()
        self.fresh_metadata = FreshMetadata(parts.meta.catch_up)
        #: whether stream records carry their append time (magic 0x23): not while a node of a release that cannot
        #: read them is live (a rolling upgrade; the node sets it from its membership)
        self.timed_records: Callable[[], bool] = lambda: True

    def route(self, info: TopicInfo, messages: list[InMessage]) -> tuple[dict[int, list[int]], bool]:
        """(partition -> indexes of its messages, whether any message may have index keys): explicit partition,
        else murmur2 of the key, else round robin."""
        # an exact list: the compiled functions take no subclass
        plain = _compiled is not None and type(messages) is list
        counts = _compiled.plain_counts(messages, info.partitions) if plain else None
        if counts is not None:  # plain messages: routed in C (the same partitions)
            first = self.round_robin.take(info.name, counts[0]) if counts[0] else 0
            routed: dict[int, list[int]] = _compiled.groups(messages, info.partitions, first)
            for p, idxs in routed.items():  # each explicit partition checked once, as below
                if messages[idxs[0]].partition is not None:
                    self.parts.partition(info, p, f"messages.{idxs[0]}.partition")
            return routed, counts[1] > 0  # a plain message's only index key is its key
        return self._route(info, messages), True

    def _route(self, info: TopicInfo, messages: list[InMessage]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for i, m in enumerate(messages):
            validate_message(i, m)
            if m.partition is not None:
                p = m.partition
                if type(p) is not int or p not in groups:  # each explicit partition checked once
                    self.parts.partition(info, p, f"messages.{i}.partition")
            elif m.key is not None:
                p = partition_for_key(m.key, info.partitions)
            else:
                p = self.round_robin.next(info.name, info.partitions)
            groups.setdefault(p, []).append(i)
        return groups

    def produce(self, info: TopicInfo, messages: list[InMessage], node_id: int) -> list[Produced]:
        """Append every message; returns once all are fsynced in the WAL."""
        if not isinstance(messages, list) or not messages:
            raise InvalidField("messages", "must be a non-empty list")
        groups, keys = self.route(info, messages)
        for pi in groups:
            part = self.parts.get(info.name, pi)
            if not part.owned:
                raise self.parts.not_served(part)
        self.parts.storage.wait_for_cache_room()
        now = self.clock()  # append time: index entries are ordered and filtered by it
        limit = self.limits.of(info.name)
        built = []
        for pi, idxs in groups.items():
            msgs = [messages[i] for i in idxs]
            batch = encode_batch(msgs, now, "timestamp")  # a message without a timestamp gets the append time
            if len(batch) > limit.bytes:  # the batch holds every value: only then can one be over the limit
                check_values(info.name, pi, msgs, idxs, limit)
            if len(batch) + RECORD_HEADER_SIZE > self.max_body:
                raise InvalidField("messages", f"{len(batch)} bytes for partition {pi} in one request exceed "
                                               f"the {self.max_body}-byte limit")
            built.append((pi, idxs, msgs, batch))
        # (position, message, keys) of the messages with index keys, by partition
        keyed = {pi: [(j, m, k) for j, m in enumerate(msgs) if (k := index_keys(m))] if keys else []
                 for pi, _, msgs, _ in built}
        served = {pi: self.parts.get(info.name, pi) for pi, *_ in built}
        pending = []
        with contextlib.ExitStack() as held:
            # Every partition's lock while the request's ownership is checked and its batches queued, so that a
            # partition handed off, fenced or deleted since the check above refuses the request before any of
            # its batches is queued: an error answer means nothing of it was stored (a client retrying it would
            # store the other partitions' messages twice). Taken in partition order; no other path holds two.
            for pi in sorted(served):
                held.enter_context(served[pi].lock)
            for part in served.values():
                if not part.owned or part.data is None or part.data.fenced or part.data.closed:
                    raise self.parts.not_served(part)
            # then each stream's append lock (a fence waits for it), in the same order, and the check again
            for pi in sorted(served):
                data = served[pi].data
                assert data is not None  # checked above, under the partition's lock held since
                held.enter_context(data.append_lock)
            for part in served.values():
                if part.data is None or part.data.fenced or part.data.closed:
                    raise self.parts.not_served(part)
            # the whole request against the free-space floor, reserved: no append of it is refused one by one
            held.enter_context(self.parts.storage.disk.reserve(
                "wal", sum(len(b[3]) + RECORD_HEADER_SIZE + WAL_HEADER_SIZE for b in built)))
            for pi, idxs, msgs, batch in built:
                part = served[pi]
                data = part.data
                assert data is not None  # checked above, under the lock held since
                base = data.next_offset
                entries = [IndexEntry(info.name, pi, base + j, record_size(m), now, k) for j, m, k in keyed[pi]]
                try:
                    fut = data.append(with_base_offset(batch, base), len(msgs), base,
                                      (lambda rec, e=entries: self.dispatch(e)) if entries else None,
                                      now if self.timed_records() else None)
                except Fenced:
                    raise self.parts.not_served(part) from None
                pending.append((fut, pi, base, idxs, data))
        results: list[Produced | None] = [None] * len(messages)
        for fut, pi, base, idxs, _ in pending:
            fut.result()
            # the id's topic and partition half encoded (and the last offset range-checked) once per partition
            prefix = encode_message_id(info.topic_id, pi, base + len(idxs) - 1)[:16]
            if _compiled is not None and type(messages) is list:
                _compiled.fill_produced(results, idxs, pi, base, prefix, messages, now)
                continue
            for j, i in enumerate(idxs):
                t = messages[i].timestamp
                results[i] = _new(Produced, (pi, base + j, f"{prefix}{base + j:016x}", now if t is None else t))
        for _, pi, _, _, stream in pending:  # fenced once queued: not this node's records to promise
            if stream.fenced:
                raise self.parts.not_served(served[pi]).written()  # in the WAL: the new owner may replay them
        try:
            self.fresh_metadata.wait()  # a deletion of the topic elsewhere committed before this answer is seen
        except Exception as exc:  # noqa: BLE001 - the records are stored: an error answer would have them sent twice
            log.warning("metadata not read before a produce's answer: a deletion of its topic on another node in the "
                        "last moments is not seen", extra={"topic": info.name, "error": f"{type(exc).__name__}: {exc}"})
        if self.parts.registry.topic_id_of(info.name) != info.topic_id:
            raise TopicNotFound(info.name)  # deleted meanwhile: its records go with it, none acknowledged
        try:
            self.parts.storage.check_usable()
        except LeaseLapsed as exc:  # the lease lapsed while the records were written: stored, not acknowledged
            raise exc.written() from exc
        return results  # type: ignore[return-value]
