"""`spark.read.format("mqindex")` against real servers: a `mqindex serve` process (Kafka listener,
SeaweedFS objects, PostgreSQL metadata) fed by librdkafka producers with every codec, Spark local[2].

The batch read must return exactly what a Kafka consumer reads for the same offsets, every column."""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.spark_source import register
from jobs.spark_source.options import SourceOptionError, parse_options
from jobs.spark_source.plan import plan_scan
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess

TOPIC = "events"
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 240
T0 = 1_700_000_000_000
TRIMMED = "trimmed"

Row = tuple[Any, ...]


class Served:
    def __init__(self, server: KafkaServerProcess, store_url: str, meta_url: str) -> None:
        self.server, self.store_url, self.meta_url = server, store_url, meta_url

    def options(self, topic: str = TOPIC, **kw: str) -> dict[str, str]:
        return {"metadata": self.meta_url, "store": self.store_url, "topic": topic, **kw}


def _produce(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1),
                                  NewTopic(TRIMMED, 1, 1, config={"retention.bytes": "6000"})]).values():
        f.result(30)
    for n, codec in enumerate(CODECS):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "acks": "all", "linger.ms": 5})
        for i in range(PER_CODEC):
            j = n * PER_CODEC + i
            headers = [("KEYS", f"cust-{j % 7} region-{j % 3}".encode()),
                       ("trace", None if j % 9 == 0 else b"\x00\xff")]
            key = None if j % 13 == 0 else f"k-{j % 50}".encode()
            value = None if j % 17 == 0 else (f"{codec}:{j}:".encode() + b"x" * (j % 40))
            p.produce(TOPIC, key=key, value=value, headers=headers if j % 5 else None, partition=j % PARTITIONS,
                      timestamp=T0 + j * 10)
        assert p.flush(30) == 0
        time.sleep(0.6)  # a later upload: several objects per partition
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for rnd in range(8):  # 8 uploads of ~2 KB: retention by size trims the oldest
        for i in range(20):
            p.produce(TRIMMED, key=f"t-{i}".encode(), value=os.urandom(100), timestamp=T0 + rnd * 1000 + i)
        assert p.flush(30) == 0
        time.sleep(0.6)


def consume(bootstrap: str, topic: str, ends: dict[int, int], starts: dict[int, int] | None = None) -> list[Row]:
    """What a Kafka consumer reads of [start, end) of each partition, as the source's rows."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out: list[Row] = []
    try:
        starts = starts or {}
        c.assign([TopicPartition(topic, p, starts.get(p, -2)) for p in ends])
        left = {p for p, e in ends.items() if e > starts.get(p, 0)}
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            if m.offset() >= ends[m.partition()]:
                left.discard(m.partition())
                continue
            ts_type, ts = m.timestamp()
            out.append((m.key(), m.value(), m.topic(), m.partition(), m.offset(), ts, ts_type - 1,
                        [(k, v) for k, v in (m.headers() or [])]))
            if m.offset() + 1 >= ends[m.partition()]:
                left.discard(m.partition())
        assert not left, f"consumer did not reach the end of partitions {left}"
    finally:
        c.close()
    return sorted(out, key=lambda r: (r[3], r[4]))


def spark_rows(df: Any) -> list[Row]:
    out = []
    for r in df.collect():
        ts = int(r.timestamp.replace(tzinfo=dt.UTC).timestamp() * 1000) if r.timestamp.tzinfo is None else \
            int(r.timestamp.timestamp() * 1000)
        out.append((r.key, r.value, r.topic, r.partition, r.offset, ts, r.timestampType,
                    [(h.key, h.value) for h in r.headers]))
    return sorted(out, key=lambda r: (r[3], r[4]))


def committed(s: Served, topic: str) -> dict[int, tuple[int, int]]:
    plan = plan_scan(parse_options(s.options(topic)))
    return {r.partition: (r.retained_start, r.committed_end) for r in plan.ranges}


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(partitions)}
    finally:
        c.close()


@pytest.fixture(scope="module")
def served(seaweedfs: Any, pg_url: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base: Path = tmp_path_factory.mktemp("spark-source")
    store_url = seaweedfs.store_url("mqindex", f"source-{uuid.uuid4().hex[:8]}")
    meta_url = pg_url()
    server = KafkaServerProcess(base / "node", "--store", store_url, "--metadata", meta_url,
                                "--maintenance-interval-s", "0.2").start()
    try:
        _produce(server.bootstrap)
        s = Served(server, store_url, meta_url)
        for topic, n in ((TOPIC, PARTITIONS), (TRIMMED, 1)):
            def uploaded(topic: str = topic, n: int = n) -> bool:
                marks = high_watermarks(server.bootstrap, topic, n)
                return all(committed(s, topic)[p][1] == marks[p][1] for p in range(n))
            wait_for(f"every record of {topic} uploaded", uploaded, timeout=60, interval=0.3)
        wait_for("retention trimmed the oldest uploads", lambda: committed(s, TRIMMED)[0][0] > 0, timeout=30)
        yield s
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mq(spark: Any, served: Served) -> Any:
    register(spark)
    return spark


def test_batch_read_equals_a_kafka_consumer_every_column(mq: Any, served: Served) -> None:
    ends = {p: e for p, (_s, e) in committed(served, TOPIC).items()}
    want = consume(served.server.bootstrap, TOPIC, ends)
    assert len(want) == len(CODECS) * PER_CODEC
    got = spark_rows(mq.read.format("mqindex").options(**served.options(maxSplitBytes="4096")).load())
    assert got == want
    # every codec, keyless and valueless records, null header values are in the data
    assert {r[1].split(b":")[0] for r in got if r[1]} == {c.encode() for c in CODECS}
    assert any(r[0] is None for r in got) and any(r[1] is None for r in got)
    assert any(h[1] is None for r in got for h in r[7]) and any(r[7] == [] for r in got)


def test_schema_is_the_kafka_sources(mq: Any, served: Served) -> None:
    df = mq.read.format("mqindex").options(**served.options()).load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]


def test_offsets_json_and_partitions(mq: Any, served: Served) -> None:
    ends = {p: e for p, (_s, e) in committed(served, TOPIC).items()}
    opts = served.options(partitions="0,2", startingOffsets='{"events": {"0": 100, "2": -2}}',
                          endingOffsets=f'{{"events": {{"0": 150, "2": {ends[2] - 3}}}}}')
    got = spark_rows(mq.read.format("mqindex").options(**opts).load())
    want = consume(served.server.bootstrap, TOPIC, {0: 150, 2: ends[2] - 3}, {0: 100, 2: 0})
    assert got == want and {r[3] for r in got} == {0, 2}
    assert [r[4] for r in got if r[3] == 0] == list(range(100, 150))


def test_timestamp_options_select_rows_by_record_timestamp(mq: Any, served: Served) -> None:
    lo, hi = T0 + 3000, T0 + 5000
    got = spark_rows(mq.read.format("mqindex").options(**served.options(
        startingTimestamp=str(lo), endingTimestamp=str(hi))).load())
    ends = {p: e for p, (_s, e) in committed(served, TOPIC).items()}
    want = [r for r in consume(served.server.bootstrap, TOPIC, ends) if lo <= r[5] < hi]
    assert got == want and len(got) == 200


def test_retention_trimmed_partition_reads_what_is_retained(mq: Any, served: Served) -> None:
    start, end = committed(served, TRIMMED)[0]
    assert 0 < start < end
    got = spark_rows(mq.read.format("mqindex").options(**served.options(TRIMMED)).load())
    assert got == consume(served.server.bootstrap, TRIMMED, {0: end})
    assert got[0][4] == start
    below = served.options(TRIMMED, startingOffsets='{"trimmed": {"0": 0}}')
    with pytest.raises(Exception, match="no longer retained"):
        mq.read.format("mqindex").options(**below).load().collect()
    lenient = spark_rows(mq.read.format("mqindex").options(**below, failOnDataLoss="false").load())
    assert lenient == got


def test_bad_options_are_named() -> None:
    with pytest.raises(SourceOptionError, match="metadata: required"):
        parse_options({"store": "file:///x", "topic": "t"})
    with pytest.raises(SourceOptionError, match="exactly one of topic"):
        parse_options({"metadata": "sqlite:///x", "store": "file:///x"})
    with pytest.raises(SourceOptionError, match="startingOffsets"):
        parse_options({"metadata": "sqlite:///x", "store": "file:///x", "topic": "t", "startingOffsets": "{bad"})
    with pytest.raises(SourceOptionError, match="startingTimestamp .* is after endingTimestamp"):
        parse_options({"metadata": "sqlite:///x", "store": "file:///x", "topic": "t", "startingTimestamp": "5",
                       "endingTimestamp": "1"})
