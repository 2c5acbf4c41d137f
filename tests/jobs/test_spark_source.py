"""`spark.read.format("mqindex")` against real servers: a `mqindex serve` process (Kafka listener,
SeaweedFS objects, PostgreSQL metadata) fed by librdkafka producers with every codec, Spark local[2].

The batch read must return exactly what a Kafka consumer reads for the same offsets, every column."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, Filter, GreaterThanOrEqual, LessThan

from jobs.spark_source import register
from jobs.spark_source.columnar import store_reads
from jobs.spark_source.options import SourceOptionError, parse_options
from jobs.spark_source.plan import plan_scan
from jobs.spark_source.pushdown import Pushed, push
from jobs.spark_source.read import ms_to_datetime, worker_store
from jobs.spark_source.source import plan_tasks, read_task
from storage_tier import MeterSnapshot
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess

TOPIC = "events"
PARTITIONS = 3
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 240
T0 = 1_700_000_000_000
TRIMMED = "trimmed"
KEYED = "keyed"  # ~7 MB in several uploads: a key's records are consecutive, so its hits sit in one block
KEYED_RECORDS = 36_000
TIMED = "timed"  # three uploads at real times

Row = tuple[Any, ...]


class Served:
    def __init__(self, server: KafkaServerProcess, store_url: str, meta_url: str) -> None:
        self.server, self.store_url, self.meta_url = server, store_url, meta_url
        self.round_ms: list[int] = []  # TIMED: the wall clock before each round was produced

    def options(self, topic: str = TOPIC, **kw: str) -> dict[str, str]:
        return {"metadata": self.meta_url, "store": self.store_url, "topic": topic, **kw}


def _produce(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1), NewTopic(KEYED, 1, 1), NewTopic(TIMED, 1, 1),
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
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for i in range(KEYED_RECORDS):
        p.produce(KEYED, key=f"user-{i // 12}".encode(), value=os.urandom(180), partition=0)
        if i % 12_000 == 11_999:
            assert p.flush(30) == 0
            time.sleep(0.6)
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
                                "--maintenance-interval-s", "0.2").start(timeout=180)  # a loaded machine: slow
    try:
        _produce(server.bootstrap)
        s = Served(server, store_url, meta_url)
        for topic, n in ((TOPIC, PARTITIONS), (TRIMMED, 1), (KEYED, 1)):
            def uploaded(topic: str = topic, n: int = n) -> bool:
                marks = high_watermarks(server.bootstrap, topic, n)
                return all(committed(s, topic)[p][1] == marks[p][1] for p in range(n))
            wait_for(f"every record of {topic} uploaded", uploaded, timeout=60, interval=0.3)
        wait_for("retention trimmed the oldest uploads", lambda: committed(s, TRIMMED)[0][0] > 0, timeout=30)
        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
        for rnd in range(3):  # each round uploaded before the next starts: its objects are committed before it
            s.round_ms.append(int(time.time() * 1000))
            for i in range(100):
                p.produce(TIMED, key=f"r{rnd}-{i}".encode(), value=b"t" * 50)
            assert p.flush(30) == 0
            end = high_watermarks(server.bootstrap, TIMED, 1)[0][1]
            wait_for(f"round {rnd} of {TIMED} uploaded", lambda end=end: committed(s, TIMED)[0][1] == end, timeout=30)
            time.sleep(0.05)
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


def test_subscribe_a_list_or_a_pattern_and_latest_in_the_offsets_json(mq: Any, served: Served) -> None:
    def read(**kw: str) -> list[Row]:
        df = mq.read.format("mqindex").options(metadata=served.meta_url, store=served.store_url, **kw).load()
        return sorted(spark_rows(df), key=lambda r: (r[2], r[3], r[4]))

    ends = {t: {p: e for p, (_s, e) in committed(served, t).items()} for t in (TOPIC, TIMED)}
    want = sorted(consume(served.server.bootstrap, TOPIC, ends[TOPIC])
                  + consume(served.server.bootstrap, TIMED, ends[TIMED]), key=lambda r: (r[2], r[3], r[4]))
    assert read(subscribe=f"{TOPIC}, {TIMED}") == want
    assert read(subscribePattern="ev.*|tim.*|e") == want  # the whole name: "e" alone would take keyed and trimmed
    got = read(topic=TOPIC, startingOffsets='{"events": {"0": -1, "1": -2}}')  # -1 latest, -2 earliest
    assert got == [r for r in want if r[2] == TOPIC and r[3] != 0]  # partition 2, not named: earliest


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


def gets_of_read(s: Served, where: Callable[[Pushed], None] | None = None, **kw: str) -> tuple[MeterSnapshot, int]:
    """(store requests and bytes, rows) of a read run in this process through the functions Spark's tasks run,
    with filters as pushdown takes them (`where` adds them to a Pushed)."""
    opts = parse_options(s.options(**kw))
    pushed = Pushed()
    if where is not None:
        where(pushed)
    store = worker_store(opts.store_url)
    before = store.meter.snapshot()
    rows = sum(1 for task in plan_tasks(opts, pushed) for _ in read_task(opts, task, pushed))
    return store.meter.snapshot() - before, rows


def _push(*filters: Filter) -> Callable[[Pushed], None]:
    def add(p: Pushed) -> None:
        left = list(push(p, filters))
        assert not left, left
    return add


def test_offset_range_reads_only_the_objects_holding_it(mq: Any, served: Served) -> None:
    full, n_full = gets_of_read(served, partitions="0")
    part, n_part = gets_of_read(served, _push(GreaterThanOrEqual(("offset",), 100), LessThan(("offset",), 150)),
                                partitions="0")
    assert n_part == 50 and n_full == len(CODECS) * PER_CODEC // PARTITIONS
    assert 0 < part["GET"] < full["GET"] and part.bytes_out < full.bytes_out
    # the same through Spark's JVM reader, its GETs counted by its tasks (the scan's storeGets / storeBytes)
    whole = mq.read.format("mqindex").options(**served.options()).load().where("partition = 0")
    assert len(whole.collect()) == n_full
    df = mq.read.format("mqindex").options(**served.options()).load().where(
        "partition = 0 AND offset >= 100 AND offset < 150")
    assert spark_filter(df) == ""
    assert sorted(r.offset for r in df.collect()) == list(range(100, 150))
    jvm_full, jvm_part = store_reads(whole), store_reads(df)
    print(f"offset range: JVM reader {jvm_part} against {jvm_full} for the partition")
    assert 0 < jvm_part.gets < jvm_full.gets and 0 < jvm_part.bytes < jvm_full.bytes, (jvm_part, jvm_full)


def test_timestamp_bound_prunes_objects_committed_before_it(mq: Any, served: Served) -> None:
    t2 = served.round_ms[2]
    full, n_full = gets_of_read(served, topic=TIMED)
    late, n_late = gets_of_read(served, _push(GreaterThanOrEqual(("timestamp",), ms_to_datetime(t2))), topic=TIMED,
                                timeSkewMs="0")
    assert n_full == 300 and n_late == 100
    assert late["GET"] < full["GET"] and late.bytes_out < full.bytes_out
    whole = mq.read.format("mqindex").options(**served.options(TIMED, timeSkewMs="0")).load()
    assert len(whole.collect()) == n_full
    df = mq.read.format("mqindex").options(**served.options(TIMED, timeSkewMs="0")).load().where(
        F.col("timestamp") >= ms_to_datetime(t2))
    assert spark_filter(df) == ""
    assert sorted(r.key for r in df.collect()) == sorted(f"r2-{i}".encode() for i in range(100))
    jvm_full, jvm_late = store_reads(whole), store_reads(df)
    print(f"timestamp bound: JVM reader {jvm_late} against {jvm_full} for the topic")
    assert 0 < jvm_late.gets < jvm_full.gets and 0 < jvm_late.bytes < jvm_full.bytes, (jvm_late, jvm_full)


def test_key_predicate_reads_only_the_blocks_of_its_hits(mq: Any, served: Served) -> None:
    scan, n_scan = gets_of_read(served, topic=KEYED)
    keyed, n_keyed = gets_of_read(served, _push(EqualTo(("key",), b"user-1234")), topic=KEYED,
                                  index=served.server.url)
    # the yardstick: a read told the hits' offsets (how the uploads cut the topic into objects and blocks
    # depends on timing, so a fixed share of the scan is not)
    exact, n_exact = gets_of_read(served, _push(GreaterThanOrEqual(("offset",), 1234 * 12),
                                                LessThan(("offset",), 1235 * 12)), topic=KEYED)
    assert n_scan == KEYED_RECORDS and n_keyed == 12 and n_exact == 12
    print(f"key predicate: {keyed.bytes_out:,} bytes in {keyed['GET']} GETs; the hits' offsets "
          f"{exact.bytes_out:,} bytes in {exact['GET']} GETs; scan {scan.bytes_out:,} bytes in {scan['GET']} GETs")
    assert keyed["GET"] <= 2 and keyed["GET"] < scan["GET"], (keyed, scan)
    assert keyed.bytes_out <= exact.bytes_out < scan.bytes_out, (keyed, exact, scan)
    df = mq.read.format("mqindex").options(**served.options(KEYED, index=served.server.url)).load()
    one = df.where("key = 'user-1234'")
    assert spark_filter(one) == ""
    explained = one._jdf.queryExecution().explainString(
        mq._jvm.org.apache.spark.sql.execution.ExplainMode.fromString("formatted"))  # df.explain("formatted")
    assert "PushedFilters: [IsNotNull(key), EqualTo(key," in explained, explained
    assert sorted(r.offset for r in one.collect()) == list(range(1234 * 12, 1235 * 12))
    some = df.where(F.col("key").isin(b"user-7", b"user-2999", b"nobody"))
    assert sorted(r.offset for r in some.collect()) == [*range(7 * 12, 8 * 12), *range(2999 * 12, 3000 * 12)]


def test_index_keys_option_reads_records_indexed_under_a_header_key(mq: Any, served: Served) -> None:
    ends = {p: e for p, (_s, e) in committed(served, TOPIC).items()}
    every = consume(served.server.bootstrap, TOPIC, ends)

    def indexed(r: Row, key: bytes) -> bool:
        parts = [p for name, v in r[7] if name == "KEYS" and v for p in v.split(b" ")]
        return r[0] == key or key in parts or any(name == "UNIQ_KEY" and v == key for name, v in r[7])

    want = [r for r in every if indexed(r, b"cust-3") or indexed(r, b"region-9")]
    assert 0 < len(want) < len(every)
    opts = served.options(index=served.server.url, indexKeys="cust-3, region-9")
    scan, _ = gets_of_read(served)
    looked_up, n = gets_of_read(served, index=served.server.url, indexKeys="cust-3,region-9")
    assert n == len(want) and looked_up.bytes_out <= scan.bytes_out
    assert spark_rows(mq.read.format("mqindex").options(**opts).load()) == want
    both = mq.read.format("mqindex").options(**opts).load().where("key = 'k-11'")
    assert spark_rows(both) == [r for r in want if r[0] == b"k-11"] != []
    # no record of key k-10 has headers: no hit, no task
    assert mq.read.format("mqindex").options(**opts).load().where("key = 'k-10'").count() == 0
    with pytest.raises(SourceOptionError, match="indexKeys: needs the index option"):
        parse_options(served.options(indexKeys="cust-3"))
    with pytest.raises(SourceOptionError, match="indexKeys: expected"):
        parse_options(served.options(index=served.server.url, indexKeys="cust-3,,x"))


def spark_filter(df: Any) -> str:
    """The filters Spark still evaluates above the scan (the source took every other one)."""
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    return " ".join(line for line in plan.splitlines() if "Filter " in line and "RuntimeFilters" not in line)


def _produce_stream(s: Served, topic: str, first: int, n: int) -> None:
    p = Producer({"bootstrap.servers": s.server.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(first, first + n):
        p.produce(topic, key=f"s-{i}".encode(), value=str(i).encode(), partition=i % 2)
    assert p.flush(30) == 0
    marks = high_watermarks(s.server.bootstrap, topic, 2)
    wait_for(f"{topic} uploaded", lambda: all(committed(s, topic)[p][1] == marks[p][1] for p in range(2)),
             timeout=30, interval=0.2)


def test_batch_read_after_compaction_equals_a_kafka_consumer(mq: Any, seaweedfs: Any, pg_url: Callable[[], str],
                                                               tmp_path: Path) -> None:
    """Stream set objects split into stream objects, those merged, and the objects they replaced deleted from the
    store: both readers plan from the objects that hold the records now, and read what a Kafka consumer reads."""
    store_url = seaweedfs.store_url("mqindex", f"compacted-{uuid.uuid4().hex[:8]}")
    meta_url = pg_url()
    server = KafkaServerProcess(tmp_path / "node", "--store", store_url, "--metadata", meta_url,
                                "--compaction-interval-s", "0", "--compaction-force-split-ms", "0",
                                "--compaction-grace-ms", "0").start(timeout=180)
    try:
        s = Served(server, store_url, meta_url)
        topic = "compacted"
        with AdminClient({"bootstrap.servers": server.bootstrap}) as admin:
            admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        for rnd in range(4):  # each round uploaded before the next: four stream set objects
            _produce_stream(s, topic, rnd * 100, 100)
        before = plan_scan(parse_options(s.options(topic)))
        assert {sp.kind for sp in before.splits} == {"SSO"} and len({sp.key for sp in before.splits}) >= 4
        deleted: list[int] = []
        for _ in range(3):  # split, merge the stream objects, delete what was replaced (no grace period)
            r = httpx.post(server.url + "/v1/admin/compaction", timeout=120)
            assert r.status_code == 200, r.text
            assert r.json()["errors"] == []
            deleted += r.json()["deleted"]
        after = plan_scan(parse_options(s.options(topic)))
        assert {sp.kind for sp in after.splits} == {"SO"}
        store = worker_store(store_url)
        gone = {sp.key for sp in before.splits} - {sp.key for sp in after.splits}
        assert deleted and gone and not any(store.exists(k) for k in gone)
        ends = {p: e for p, (_s, e) in committed(s, topic).items()}
        want = consume(server.bootstrap, topic, ends)
        assert sorted(int(r[1]) for r in want) == list(range(400))
        for reader in ("jvm", "python"):
            got = spark_rows(mq.read.format("mqindex").options(**s.options(topic, reader=reader)).load())
            assert got == want, reader
    finally:
        server.stop()


def search(s: Served, spark: Any, *argv: str) -> tuple[int, str, str]:
    from api.cli.main import build_parser
    from api.cli.search import run_search

    full = ["search", *argv, "--metadata", s.meta_url, "--store", s.store_url, "--progress-interval", "0.5"]
    out, err = io.StringIO(), io.StringIO()
    rc = run_search(build_parser(full).parse_args(full), spark=spark, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_search_cli_value_predicate_key_and_exit_codes(mq: Any, served: Served) -> None:
    rc, out, err = search(served, mq, TOPIC, "--where", "value LIKE 'zstd:%' AND partition = 1", "--json",
                          "--from", str(T0), "--to", str(T0 + 12_000))
    assert rc == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    want = [j for j in range(4 * PER_CODEC, 5 * PER_CODEC) if j % PARTITIONS == 1 and j % 17 and j * 10 < 12_000]
    assert sorted(int(m["value"].split(":")[1]) for m in got) == want
    assert all(m["headers"].get("KEYS", "").startswith("cust-") for m in got if m["headers"])
    rc, out, err = search(served, mq, KEYED, "--key", "user-77", "--index", served.server.url)
    assert rc == 0 and len(out.splitlines()) == 12 and "[search] done: 12 matches" in err
    rc, out, err = search(served, mq, TOPIC, "--where", "value LIKE 'no such value%'")
    assert rc == 1 and out == ""
    rc, _out, err = search(served, mq, "nosuchtopic", "--where", "true")
    assert rc == 2 and "unknown topic 'nosuchtopic'" in err
    rc, _out, err = search(served, mq, TOPIC, "--from", "yesterday")
    assert rc == 2 and "--from" in err


def test_search_cli_prints_matches_as_they_come_with_progress(mq: Any, served: Served) -> None:
    """Matches are printed as Spark hands them over (one job per task of the read), not once the whole read is
    done; progress lines come every --progress-interval."""
    from api.cli.main import build_parser
    from api.cli.search import run_search

    tracker = mq.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup(None))

    class Watched(io.StringIO):
        """stdout that notes how many Spark jobs had started when each match was printed"""

        def __init__(self) -> None:
            super().__init__()
            self.jobs_at_line: list[int] = []

        def write(self, text: str) -> int:
            if text.strip():
                self.jobs_at_line.append(len(tracker.getJobIdsForGroup(None)) - jobs_before)
            return super().write(text)

    full = ["search", TOPIC, "--where", "value LIKE '%:1%'", "--metadata", served.meta_url, "--store",
            served.store_url, "--progress-interval", "0.05"]
    out, err = Watched(), io.StringIO()
    mq.conf.set("spark.sql.files.maxPartitionBytes", "4096")  # the read in several tasks, so several jobs
    try:
        rc = run_search(build_parser(full).parse_args(full), spark=mq, out=out, err=err)
    finally:
        mq.conf.unset("spark.sql.files.maxPartitionBytes")
    assert rc == 0, err.getvalue()
    jobs = len(tracker.getJobIdsForGroup(None)) - jobs_before
    lines = out.getvalue().splitlines()
    assert len(lines) == len(out.jobs_at_line) > 1
    assert out.jobs_at_line[0] < jobs, (out.jobs_at_line, jobs)  # the first match came before the last job
    assert re.search(r"^\[search\] \d+s: tasks \d+/\d+$", err.getvalue(), re.M), err.getvalue()
    assert re.search(rf"^\[search\] done: {len(lines)} matches \([0-9.]+ MB read from the store in [1-9]\d* GETs\)$",
                     err.getvalue(), re.M), err.getvalue()


_TASK_IN_A_WORKER = """
import gc, json, sys
from jobs.spark_source.options import parse_options
from jobs.spark_source.source import MqindexReader, plan_tasks
opts = parse_options(json.loads(sys.argv[1]))
reader = MqindexReader(opts)
task = plan_tasks(opts, reader.pushed)[0]
rows = sum(b.num_rows for b in reader.read(task))
print(json.dumps({"rows": rows, "walked": len(gc.get_objects())}))
"""


def test_a_read_task_leaves_the_worker_heap_settled(served: Served) -> None:
    """PySpark's daemon runs a full gc.collect() after every task of a reused Python worker: after a task of
    the source, such a collection walks only what the task left, not pyarrow, pyspark.sql and the store
    client's boto3 service models (frozen at the task's end). Run as a Spark worker runs it: a fresh process
    reading one task through MqindexReader.read."""
    done = subprocess.run([sys.executable, "-c", _TASK_IN_A_WORKER, json.dumps(served.options())],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["rows"] > 0
    assert got["walked"] < 10_000, got  # without the settling: the worker's ~100,000 objects
