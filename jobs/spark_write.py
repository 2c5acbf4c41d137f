"""`df.write.format("mqindex")`: a batch of rows produced to a topic through the cluster's Kafka listeners.

Registered with the reader (`from jobs.spark_source import register; register(spark)`), then

    df.write.format("mqindex").mode("append").option("kafka.bootstrap.servers", "node1:9092,node2:9092") \\
        .option("topic", "orders").save()

Columns as Spark's Kafka sink takes them: `value` (required, binary or string), `key` (binary or string),
`headers` (array of struct<key: string, value: binary>), `partition` (int: the partition to write to; null or
absent: the Kafka partitioner of the key), `topic` (string: per row, when the `topic` option is not given).
Other columns are ignored, so rows read with `spark.read.format("mqindex")` can be written back as they are.

Each Spark task produces its rows with an idempotent producer (`enable.idempotence`, `acks=all`): a produce
retried after a lost answer is written once, each partition keeps the task's order, and the task ends when
every row is acknowledged (or fails naming the topic and the first errors, and Spark retries it). As with
Spark's Kafka sink the write is at least once across task retries: a task retried after some of its rows were
acknowledged writes those rows again. Options `kafka.*` other than the bootstrap servers are passed to the
producer (librdkafka names, e.g. `kafka.compression.type`).

Bad options or columns raise `WriteOptionError` naming them before any row is produced.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

log = logging.getLogger("mqindex.jobs.spark_write")

BOOTSTRAP = "kafka.bootstrap.servers"
#: producer settings the writer's guarantees rest on (a `kafka.*` option may not change them)
FIXED = {"enable.idempotence": True, "acks": "all"}
MAX_ERRORS_SHOWN = 3


class WriteOptionError(ValueError):
    """A bad option or column of `df.write.format("mqindex")` (the message names it)."""


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None  # None: each row's `topic` column
    producer: dict[str, Any] = field(default_factory=dict)  # librdkafka settings from `kafka.*` options


def parse_write_options(opts: Mapping[str, str]) -> WriteOptions:
    lower = {k.lower(): (k, v) for k, v in opts.items()}
    bootstrap = lower.get(BOOTSTRAP, (None, ""))[1]
    if not bootstrap or not bootstrap.strip():
        raise WriteOptionError(f"{BOOTSTRAP}: required (host:port of the cluster's Kafka listeners, "
                               f"comma-separated)")
    producer: dict[str, Any] = {}
    for low, (name, value) in lower.items():
        if low.startswith("kafka.") and low != BOOTSTRAP:
            setting = name[len("kafka."):]
            if setting in FIXED:
                raise WriteOptionError(f"{name}: the writer always produces with {setting}={FIXED[setting]}")
            producer[setting] = value
    topic = lower.get("topic", (None, None))[1]
    return WriteOptions(bootstrap.strip(), topic.strip() if topic and topic.strip() else None, producer)


_TEXT_OR_BYTES = (BinaryType, StringType)
_HEADERS = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


def check_schema(schema: StructType, opts: WriteOptions) -> None:
    """WriteOptionError naming the first column the writer cannot take."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise WriteOptionError("column value: required (binary or string)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], _TEXT_OR_BYTES):
            raise WriteOptionError(f"column {name}: must be binary or string, not {fields[name].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType["key"].dataType, StringType)
              and isinstance(t.elementType["value"].dataType, _TEXT_OR_BYTES))
        if not ok:
            raise WriteOptionError(f"column headers: must be {_HEADERS.simpleString()}, not {t.simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise WriteOptionError(f"column partition: must be int, not {fields['partition'].simpleString()}")
    if opts.topic is None and not isinstance(fields.get("topic"), StringType):
        raise WriteOptionError("topic: give the topic option or a string column topic")


@dataclass
class Written(WriterCommitMessage):
    """What one task produced: rows per topic."""

    rows: dict[str, int]


def _bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)  # bytearray


class _Deliveries:
    """The producer's delivery reports. librdkafka calls this only from poll() and flush(), on the thread producing:
    no lock (one here once stayed held, and a task waited on it in flush() until the test's timeout)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.failed = 0

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            if len(self.errors) < MAX_ERRORS_SHOWN:
                self.errors.append(f"{msg.topic()}/{msg.partition()}: {err}")


def produce_rows(opts: WriteOptions, rows: Iterator[Any], flush_timeout_s: float = 300.0) -> dict[str, int]:
    """Produce `rows` (pyspark Rows or mappings with the writer's columns); rows per topic once every one is
    acknowledged; RuntimeError naming the topic and the first errors otherwise."""
    from confluent_kafka import KafkaException, Producer

    conf = {"bootstrap.servers": opts.bootstrap, "linger.ms": 20, **opts.producer, **FIXED}
    try:
        producer = Producer(conf)
    except KafkaException as exc:
        raise WriteOptionError(f"kafka.*: the producer does not take these settings: {exc}") from None
    done = _Deliveries()
    # the client goes when this returns or raises: nothing left queued, and no frame of a raised error keeping it
    # (a Spark worker is reused, and a producer kept alive so went on reconnecting to a cluster long gone)
    try:
        return _produce_all(producer, done, opts, rows, flush_timeout_s)
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)  # the frames below this one (this one is cleared by `del`)
        raise
    finally:
        producer.purge()
        producer.flush(0)
        del producer


def _produce_all(producer: Any, done: _Deliveries, opts: WriteOptions, rows: Iterator[Any],
                 flush_timeout_s: float) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        get = row.asDict if hasattr(row, "asDict") else None
        r = get() if get is not None else row
        topic = opts.topic or r.get("topic")
        if not topic:
            raise WriteOptionError("topic: a row has no topic (null topic column and no topic option)")
        headers = [(h["key"], _bytes(h["value"])) for h in (r.get("headers") or [])]
        partition = r.get("partition")
        kw: dict[str, Any] = {"key": _bytes(r.get("key")), "headers": headers or None, "on_delivery": done}
        if partition is not None:
            kw["partition"] = int(partition)
        while True:
            try:
                producer.produce(topic, _bytes(r.get("value")), **kw)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain it
        counts[topic] = counts.get(topic, 0) + 1
        producer.poll(0)
    left = producer.flush(flush_timeout_s)
    if left or done.failed:
        what = f"{left} rows unacknowledged after {flush_timeout_s:.0f} s" if left else f"{done.failed} rows failed"
        raise RuntimeError(f"mqindex write to {', '.join(sorted(counts))}: {what}: {'; '.join(done.errors)}")
    return counts


class MqindexWriter(DataSourceWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> Written:
        return Written(produce_rows(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total: dict[str, int] = {}
        for m in messages:
            if isinstance(m, Written):
                for t, n in m.rows.items():
                    total[t] = total.get(t, 0) + n
        log.info("mqindex write through %s: %s rows produced", self.opts.bootstrap, total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(sum(m.rows.values()) for m in messages if isinstance(m, Written))
        log.warning("mqindex write through %s failed: %d rows of the tasks that finished stay produced",
                    self.opts.bootstrap, done)


def writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> MqindexWriter:
    """The writer of `df.write.format("mqindex")` (append only: a topic is not overwritten)."""
    if overwrite:
        raise WriteOptionError("mode: a topic is appended to, not overwritten (use mode('append'))")
    opts = parse_write_options(options)
    check_schema(schema, opts)
    return MqindexWriter(opts)
