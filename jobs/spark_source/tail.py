"""Records past a partition's committed end (still only in a node's WAL or log cache, uploaded within the
upload interval) read through the Kafka protocol from the node that leads the partition.

A batch read given `kafka.bootstrap.servers` reads each partition up to its high watermark, as Spark's Kafka
source does: the objects up to the committed end (the metadata's), then the tail [committed end, high watermark)
with a librdkafka consumer assigned to the partition (no group, nothing committed), in a Spark task of its own.
Without the option the read ends at the committed end (plan.py) and the plan says so (`read_to`).

The consumer reads as read_uncommitted, as the object reader does (every record stored, control records giving
no row): asking `kafka.isolation.level=read_committed` is refused, since the objects' records would still hold
aborted ones. The other `kafka.*` options go to the consumer as they are (security settings, for one).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jobs.spark_source.options import SourceOptionError

#: a tail read that got no record for this long (of its own waiting) fails, naming the partition and where it stopped
TAIL_TIMEOUT_S = 60.0


def _retried_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    # reported for information while librdkafka reconnects or looks the leader up again by itself
    return frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                      KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Tail:
    """Offsets [start, end) of one partition, read through Kafka."""

    topic: str
    partition: int
    start: int
    end: int


class TailReadError(RuntimeError):
    """The cluster did not serve a tail (the message names the partition and the offsets)."""


def consumer_conf(kafka: Mapping[str, str]) -> dict[str, Any]:
    """The user's kafka.* options, then what the tail read depends on: its end found by partition EOF, nothing
    committed, an offset out of range an error (never a silent jump to the end), every stored record."""
    conf: dict[str, Any] = {"group.id": f"mqindex-spark-{uuid.uuid4().hex[:12]}", "socket.timeout.ms": 30_000}
    conf.update(kafka)
    conf.update({"enable.partition.eof": True, "enable.auto.commit": False, "auto.offset.reset": "error",
                 "isolation.level": "read_uncommitted"})
    return conf


def open_consumer(kafka: Mapping[str, str]) -> Any:
    """A consumer of these options; SourceOptionError naming the option librdkafka refuses (a Java client's
    property copied from Spark's Kafka source, say) or saying confluent-kafka is not installed."""
    try:
        from confluent_kafka import Consumer, KafkaException
    except ImportError:
        raise SourceOptionError("kafka.bootstrap.servers: reading past the committed end needs confluent-kafka "
                                "(pip install 'mqindex[spark]')") from None
    try:
        return Consumer(consumer_conf(kafka))
    except KafkaException as exc:
        raise SourceOptionError(f"kafka.*: librdkafka refuses the options: {exc.args[0]}") from None


def check_kafka_options(kafka: Mapping[str, str]) -> None:
    """SourceOptionError for `kafka.*` options the tail read cannot honour."""
    if not kafka.get("bootstrap.servers", "").strip():
        raise SourceOptionError("kafka.bootstrap.servers: required with the other kafka.* options (host:port,...)")
    level = kafka.get("isolation.level", "read_uncommitted").strip().lower()
    if level != "read_uncommitted":
        raise SourceOptionError(f"kafka.isolation.level: only read_uncommitted (the objects are read with every "
                                f"record stored, aborted transactions' included), got {level!r}")


class Watermarks:
    """Partitions' high watermarks, as the cluster answers ListOffsets, through one consumer (close() it). Each
    is waited for up to the consumer's `socket.timeout.ms` (30 s unless `kafka.socket.timeout.ms` says)."""

    def __init__(self, kafka: Mapping[str, str], timeout_s: float | None = None) -> None:
        self.kafka = kafka
        self._consumer = open_consumer(kafka)  # librdkafka checks the options, socket.timeout.ms among them
        self.timeout_s = timeout_s if timeout_s is not None else \
            int(consumer_conf(kafka)["socket.timeout.ms"]) / 1000

    def get(self, topic: str, partition: int) -> int:
        """SourceOptionError naming kafka.bootstrap.servers when the cluster does not answer."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            return int(self._consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                            timeout=self.timeout_s)[1])
        except KafkaException as exc:
            raise SourceOptionError(f"kafka.bootstrap.servers: {self.kafka.get('bootstrap.servers')} did not give "
                                    f"the high watermark of {topic}/{partition}: {exc.args[0]}") from None

    def close(self) -> None:
        self._consumer.close()


def tail_rows(kafka: Mapping[str, str], tail: Tail, lo_ms: int | None = None, hi_ms: int | None = None,
              offsets: set[int] | None = None, keys: set[bytes] | None = None,
              not_null: frozenset[str] = frozenset(), timeout_s: float = TAIL_TIMEOUT_S) -> Iterator[Row]:
    """The records of `tail` as the object reader gives them (read.records: timestamps in ms), filtered alike.
    TailReadError when no record came for `timeout_s` seconds of waiting on the cluster (time spent by the caller
    between rows does not count), or for an error the client does not retry by itself."""
    from confluent_kafka import KafkaError, TopicPartition

    first = tail.start if offsets is None else max(tail.start, min(offsets, default=tail.end))
    last = tail.end if offsets is None else min(tail.end, max(offsets, default=tail.start - 1) + 1)
    if first >= last:
        return
    need_key, need_value = "key" in not_null, "value" in not_null
    where = f"{tail.topic}/{tail.partition}: offsets [{first}, {last}) through Kafka ({kafka.get('bootstrap.servers')})"
    retried = _retried_codes()
    c = open_consumer(kafka)
    try:
        c.assign([TopicPartition(tail.topic, tail.partition, first)])
        at = first  # the next offset wanted
        stalled_since = time.monotonic()
        while at < last:
            if time.monotonic() - stalled_since > timeout_s:
                raise TailReadError(f"{where}: no progress past offset {at} in {timeout_s:.0f} s")
            for m in c.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= last:
                            at = last  # the offsets up to the end held no more records (control records)
                        continue
                    if err.fatal() or not (err.retriable() or err.code() in retried):
                        raise TailReadError(f"{where}: {err.str()} (at offset {at})")
                    continue  # the client retries (a connection lost, a leader moving): the stall bound holds
                off = m.offset()
                stalled_since = time.monotonic()
                if off >= last:
                    at = last
                    break
                at = off + 1
                if off < first or (offsets is not None and off not in offsets):
                    continue
                key, value = m.key(), m.value()
                if (keys is not None and key not in keys) or (need_key and key is None) or \
                        (need_value and value is None):
                    continue
                ts_type, ts = m.timestamp()
                if (lo_ms is not None and ts < lo_ms) or (hi_ms is not None and ts >= hi_ms):
                    continue
                yield (key, value, tail.topic, tail.partition, off, ts, ts_type - 1,
                       [(k, v) for k, v in (m.headers() or [])])
                stalled_since = time.monotonic()  # the caller's time with the row is not the cluster's
    finally:
        c.close()
