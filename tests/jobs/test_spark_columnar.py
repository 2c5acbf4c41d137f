"""The JVM columnar reader (jobs/spark_source/jvm), reached as `spark.read.format("mqindex")` and as
`jobs.spark_source.columnar.read`, returns exactly the rows of the Python source (`reader=python`) and of a Kafka
consumer, Spark local[2]:

- hand-made objects in a file:// store: random batches of every codec, null keys, values and header values,
  LogAppendTime and control batches, two batches in one stream record, offset and time bounds, several splits
  of one object; the rows equal the Python source's decode (read.records); damage is an error naming the object
  and the byte;
- a real `mqindex serve` (SeaweedFS objects through presigned URLs, PostgreSQL metadata) fed by librdkafka with
  every codec and with committed and aborted transactions: the rows equal a Kafka consumer's and
  the Python source's, every column; offsets JSON, partitions and timestamp options; a query of `value` alone
  builds only that column; filters on offset, partition and timestamp prune the JVM read's tasks and filters on
  key and value are evaluated by Spark (rows equal the Python source's); one DataFrame queried with and without
  filters; a read from another Python thread than the one that registered the source;
- a `mqindex serve` whose store is a file:// directory: the same equality with a Kafka consumer, every codec.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.objects.format import StreamRecord
from broker.objects.writer import write_object
from broker.partitions.records import ProducerRecord, build_batch
from jobs.spark_source import columnar, register
from jobs.spark_source.options import SourceOptionError
from jobs.spark_source.plan import Split
from jobs.spark_source.read import records
from storage_tier import open_store
from tests.api.server import wait_for
from tests.jobs.test_spark_arrow_decode import CODECS, STREAM, T0, _object, _split, damaged_object
from tests.jobs.test_spark_source import (  # noqa: F401 - `served` is this module's fixture too
    TOPIC,
    TRIMMED,
    Served,
    committed,
    consume,
    high_watermarks,
    served,
    spark_rows,
)
from tests.kafka.conftest import KafkaServerProcess

Row = tuple[Any, ...]
TXN = "txn"


def _random_batches(rng: random.Random, n: int) -> list[Any]:
    names = ["KEYS", "UNIQ_KEY", "trace", "", "café", "x" * 30]

    def blob() -> bytes | None:
        return None if rng.random() < 0.15 else rng.randbytes(rng.randrange(0, 60))

    out = []
    for _ in range(n):
        recs = [(blob(), blob(), [(rng.choice(names), blob()) for _ in range(rng.randrange(0, 4))],
                 rng.randrange(0, 5000)) for _ in range(rng.randrange(1, 40))]
        out.append((recs, rng.choice(CODECS), rng.choice(["create", "create", "append", "control"])))
    return out


def _python_rows(store: Any, splits: list[Split], lo_ms: int | None = None, hi_ms: int | None = None) -> list[Row]:
    return sorted(((r[0], r[1], r[2], r[3], r[4], r[5], r[6], [(k, v) for k, v in r[7]])
                   for r in records(store, splits, lo_ms, hi_ms)), key=lambda r: (r[3], r[4]))


@pytest.mark.parametrize("seed", range(6))
def test_file_store_rows_are_the_python_decodes(spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    batches = _random_batches(rng, rng.randrange(4, 14))
    total = sum(len(b[0]) for b in batches)
    with tempfile.TemporaryDirectory() as root:
        store, _, size = _object(root, batches, rng.choice([0, 2]))
        cut = rng.randrange(0, total + 1)
        start, end = rng.randrange(0, cut + 1), rng.randrange(cut, total + 3)
        splits = [_split(size, start, cut), _split(size, cut, end)]
        bounds = [(None, None), (T0 + rng.randrange(0, 3000), T0 + rng.randrange(3000, 12_000))][seed % 2]
        want = _python_rows(store, splits, *bounds)
        tasks = [[splits[0]], [splits[1]]] if seed % 3 else [splits]
        got = spark_rows(columnar.read_tasks(spark, f"file://{root}", tasks, *bounds))
    assert got == want
    if bounds == (None, None):  # every record of a data batch in [start, end): control batches give none
        assert len(got) == _inside(batches, start, end)


def _inside(batches: list[Any], start: int, end: int) -> int:
    """Records of data (not control) batches with offsets in [start, end)."""
    n = base = 0
    for recs, _codec, kind in batches:
        if kind != "control":
            n += sum(1 for i in range(len(recs)) if start <= base + i < end)
        base += len(recs)
    return n


@pytest.mark.parametrize("get_bytes", [None, 1 << 20, 300_000])
def test_rows_stay_right_when_run_buffers_are_read_into_again(spark: Any, get_bytes: int | None) -> None:
    """24 MB in one split, read in GETs cut at multiples of 16 MiB (the default), 1 MiB or 300,000 bytes of the
    object, so blocks are cut by GETs (their start carried into the next GET's buffer) and buffers are read into
    again while rows of a batch point into them (SlicedBinaryVector). Every value is distinct random bytes: a
    value read from a buffer given back too early, or a block put together wrong, would differ."""
    rng = random.Random(7)
    recs = [(rng.randbytes(16), rng.randbytes(8000), [("h", rng.randbytes(8))], i) for i in range(3000)]
    with tempfile.TemporaryDirectory() as root:
        store, _, size = _object(root, [(recs[i:i + 50], CODECS[i // 50 % 5] if i % 700 == 0 else "none", "create")
                                        for i in range(0, 3000, 50)], 0)
        splits = [_split(size, 0, 3000)]
        want = _python_rows(store, splits)
        got = spark_rows(columnar.read_tasks(spark, f"file://{root}", [splits], get_bytes=get_bytes))
    assert len(got) == 3000 and got == want


def test_a_task_of_many_small_splits(spark: Any) -> None:
    """60 objects of a few kilobytes each in one task: a column batch's rows come from many GETs, a batch ends
    where it would point into a third buffer, and a buffer no row points into is read into again at once."""
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as root:
        store = open_store(f"file://{root}")
        splits, base = [], 0
        for o in range(60):
            recs = [ProducerRecord(rng.randbytes(rng.randrange(0, 300)), key=rng.randbytes(8), timestamp_ms=T0 + i)
                    for i in range(rng.randrange(1, 30))]
            batch = build_batch(recs, base, "none")
            info = write_object(store, f"o/{o}", [StreamRecord(STREAM, 0, base, len(recs), batch)], block_size=512)
            splits.append(Split("t", 2, STREAM, o, "SO", f"o/{o}", info.size, base, base + len(recs), info.size))
            base += len(recs)
        want = _python_rows(store, splits)
        got = spark_rows(columnar.read_tasks(spark, f"file://{root}", [splits]))
    assert len(got) == base and got == want


def test_large_values_cross_many_column_batches(spark: Any) -> None:
    recs = [(b"k%d" % i, b"v" * (i * 997 % 50_000), [("h", b"x" * i)], i) for i in range(3000)]
    with tempfile.TemporaryDirectory() as root:
        store, _, size = _object(root, [(recs[i:i + 500], CODECS[i // 500 % 5], "create")
                                        for i in range(0, 3000, 500)], 0)
        splits = [_split(size, 0, 3000)]
        want = _python_rows(store, splits)
        got = spark_rows(columnar.read_tasks(spark, f"file://{root}", [splits]))
    assert got == want and len(got) == 3000


@pytest.mark.parametrize("damage", ["crc", "record", "block"])
def test_damage_is_an_error_naming_the_object_and_byte(spark: Any, damage: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        _store, size = damaged_object(root, "crc" if damage == "block" else damage)
        if damage == "block":  # the block's magic
            path = f"{root}/o/1"
            with open(path, "r+b") as f:
                f.write(b"\x00")
        splits = [_split(size, 0, 20)]
        expect = {"crc": "at byte 43: record batch .*CRC mismatch", "record": "at byte 43: record batch .*cannot "
                  "decode records", "block": "at byte 0: bad block magic"}[damage]
        with pytest.raises(Exception, match=f"damaged object o/1 {expect}"):
            columnar.read_tasks(spark, f"file://{root}", [splits]).collect()


def _produce_transactions(bootstrap: str) -> None:
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(TXN, 2, 1)])[TXN].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "columnar-test", "compression.type": "zstd"})
    p.init_transactions(30)
    for rnd, commit in enumerate([True, False, True]):
        p.begin_transaction()
        for i in range(50):
            p.produce(TXN, key=f"t{rnd}-{i}".encode(), value=f"{'commit' if commit else 'abort'}-{i}".encode(),
                      partition=i % 2, headers=[("round", str(rnd).encode())])
        p.flush(30)  # sent before the abort (abort_transaction drops what is still queued)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(20):
        plain.produce(TXN, key=f"p-{i}".encode(), value=b"plain", partition=i % 2)
    assert plain.flush(30) == 0


@pytest.fixture(scope="module")
def mqc(spark: Any, served: Served) -> Iterator[Any]:  # noqa: F811 - the imported fixture
    register(spark)
    _produce_transactions(served.server.bootstrap)
    marks = high_watermarks(served.server.bootstrap, TXN, 2)
    wait_for(f"every record of {TXN} uploaded", lambda: all(committed(served, TXN)[p][1] == marks[p][1]
                                                            for p in range(2)), timeout=60, interval=0.3)
    yield spark


JVM_SCAN = "mqindex (JVM columnar reader)"  # MqindexScan's description in a query plan


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _both(spark: Any, s: Served, topic: str = TOPIC, **kw: str) -> tuple[list[Row], list[Row]]:
    """(rows of `spark.read.format("mqindex")`, read by the JVM reader, rows of the same read by the Python
    source, `reader=python`); `columnar.read`'s rows are checked equal to the first."""
    opts = s.options(topic, **kw)
    df = spark.read.format("mqindex").options(**opts).load()
    assert JVM_SCAN in _plan(df)
    got = spark_rows(df)
    assert spark_rows(columnar.read(spark, **opts)) == got
    python = spark.read.format("mqindex").options(**opts, reader="python").load()
    assert JVM_SCAN not in _plan(python)
    return got, spark_rows(python)


def test_s3_rows_equal_a_kafka_consumer_and_the_python_source(mqc: Any, served: Served) -> None:  # noqa: F811
    ends = {p: e for p, (_s, e) in committed(served, TOPIC).items()}
    want = consume(served.server.bootstrap, TOPIC, ends)
    got, python = _both(mqc, served, maxSplitBytes="4096")
    assert got == want == python and len(got) == 5 * 240
    assert {r[1].split(b":")[0] for r in got if r[1]} == {c.encode() for c in CODECS}
    assert any(r[0] is None for r in got) and any(r[1] is None for r in got)
    assert any(h[1] is None for r in got for h in r[7]) and any(r[7] == [] for r in got)
    df = columnar.read(mqc, **served.options())
    assert df.schema == mqc.read.format("mqindex").options(**served.options()).load().schema


def test_transactions_markers_give_no_row(mqc: Any, served: Served) -> None:  # noqa: F811
    ends = {p: e for p, (_s, e) in committed(served, TXN).items()}
    got, python = _both(mqc, served, TXN)
    assert got == python == _consume_uncommitted(served.server.bootstrap, TXN, ends)
    assert len(got) == 170 and sum(ends.values()) == 176  # a marker per transaction and partition holds an offset
    assert sum(1 for r in got if r[1].startswith(b"abort")) == 50  # as Spark's Kafka source (read_uncommitted)


def _consume_uncommitted(bootstrap: str, topic: str, ends: dict[int, int]) -> list[Row]:
    """A read_uncommitted Kafka consumer's rows of [0, end) of each partition: aborted records, no markers."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{time.monotonic_ns()}",
                  "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    out: list[Row] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        deadline = time.monotonic() + 60
        while len(out) < 170 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            if m.offset() < ends[m.partition()]:
                ts_type, ts = m.timestamp()
                out.append((m.key(), m.value(), m.topic(), m.partition(), m.offset(), ts, ts_type - 1,
                            [(k, v) for k, v in (m.headers() or [])]))
    finally:
        c.close()
    return sorted(out, key=lambda r: (r[3], r[4]))


def test_offsets_partitions_and_timestamp_options(mqc: Any, served: Served) -> None:  # noqa: F811
    ends = {p: e for p, (_s, e) in committed(served, TOPIC).items()}
    opts = {"partitions": "0,2", "startingOffsets": '{"events": {"0": 100, "2": -2}}',
            "endingOffsets": f'{{"events": {{"0": 150, "2": {ends[2] - 3}}}}}'}
    got, python = _both(mqc, served, **opts)
    assert got == python == consume(served.server.bootstrap, TOPIC, {0: 150, 2: ends[2] - 3}, {0: 100, 2: 0})
    lo, hi = T0 + 3000, T0 + 5000
    got, python = _both(mqc, served, startingTimestamp=str(lo), endingTimestamp=str(hi))
    assert got == python and len(got) == 200 and all(lo <= r[5] < hi for r in got)
    start, end = committed(served, TRIMMED)[0]
    got, python = _both(mqc, served, TRIMMED)
    assert got == python == consume(served.server.bootstrap, TRIMMED, {0: end}) and got[0][4] == start


def test_a_value_query_builds_only_that_column(mqc: Any, served: Served) -> None:  # noqa: F811
    df = columnar.read(mqc, **served.options()).select("value")
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    assert "mqindex columnar struct<value:binary>" in plan, plan
    python_rows = spark_rows(mqc.read.format("mqindex").options(**served.options(), reader="python").load())
    assert sorted(r.value or b"" for r in df.collect()) == sorted(r[1] or b"" for r in python_rows)
    from pyspark.sql import functions as F

    n = columnar.read(mqc, **served.options()).agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("v"))
    row = n.collect()[0]
    py = mqc.read.format("mqindex").options(**served.options(), reader="python").load().agg(
        F.count("*").alias("n"), F.sum(F.length("value")).alias("v")).collect()[0]
    assert (row.n, row.v) == (py.n, py.v)


def test_options_the_columnar_read_does_not_take(mqc: Any, served: Served) -> None:  # noqa: F811
    with pytest.raises(SourceOptionError, match="index: not taken by the columnar read"):
        columnar.read(mqc, **served.options(index=served.server.url))
    with pytest.raises(SourceOptionError, match="topic: unknown topic 'nope'"):
        columnar.read(mqc, **served.options("nope"))
    started = time.monotonic()
    assert columnar.read(mqc, **served.options(endingOffsets='{"events": {"0": 0, "1": 0, "2": 0}}')).count() == 0
    assert time.monotonic() - started < 60


def test_format_mqindex_filters_prune_the_jvm_read_and_the_rows_stay_exact(mqc: Any, served: Served) -> None:  # noqa: F811
    """Filters on offset, partition and timestamp are taken by the Python half's planning (fewer tasks); filters
    on key and value are given back to Spark: every query's rows equal the Python source's."""
    opts = served.options(maxSplitBytes="4096")
    jvm = mqc.read.format("mqindex").options(**opts).load()
    python = mqc.read.format("mqindex").options(**opts, reader="python").load()
    some = sorted(spark_rows(jvm), key=lambda r: (r[5], r[3], r[4]))
    t_mid = some[len(some) // 2][5]
    key = next(r[0] for r in some if r[0] is not None)
    wheres = ["offset >= 100 AND offset < 150", "partition = 1", "partition IN (0, 2) AND offset < 40",
              f"timestamp >= timestamp_millis({t_mid})", f"key = X'{key.hex()}'", "key IS NULL",
              "value IS NOT NULL AND offset > 200", "length(value) > 20", "size(headers) = 0 AND partition = 2"]
    for where in wheres:
        got = spark_rows(jvm.where(where))
        assert got == spark_rows(python.where(where)) and got, where
    pruned = jvm.where("offset >= 100 AND offset < 150 AND partition = 1")
    plan = _plan(pruned)
    assert JVM_SCAN in plan and "GreaterThanOrEqual(offset,100)" in plan and "EqualTo(partition,1)" in plan, plan
    assert 0 < pruned.rdd.getNumPartitions() < jvm.rdd.getNumPartitions()
    keyed = jvm.where(f"key = X'{key.hex()}'")
    assert "EqualTo(key" not in _plan(keyed).split(JVM_SCAN)[1], _plan(keyed)  # given back to Spark, not pushed
    assert keyed.rdd.getNumPartitions() == jvm.rdd.getNumPartitions()


def test_format_mqindex_reads_with_the_index_a_database_store_or_reader_python_stay_in_python(
        mqc: Any, served: Served) -> None:  # noqa: F811
    indexed = mqc.read.format("mqindex").options(**served.options(index=served.server.url)).load()
    assert JVM_SCAN not in _plan(indexed.where("key = 'x'"))
    in_db = mqc.read.format("mqindex").options(**{**served.options(), "store": served.meta_url}).load()
    assert JVM_SCAN not in _plan(in_db) and "(Python)" in _plan(in_db), _plan(in_db)
    with pytest.raises(Exception, match="JVM reader reads s3://, oss:// and file:// stores, not postgresql"):
        mqc.read.format("mqindex").options(**{**served.options(), "store": served.meta_url}, reader="jvm").load(
            ).count()
    with pytest.raises(Exception, match="a read has the source's own schema"):
        mqc.read.format("mqindex").schema("key binary").options(**served.options()).load().count()
    with pytest.raises(Exception, match="reader: expected jvm or python, got 'c'"):
        mqc.read.format("mqindex").options(**served.options(), reader="c").load().count()
    for given in ({"reader": "jvm"}, {"reader": "python"}, {"index": served.server.url}):
        with pytest.raises(Exception, match="columnarPlan: set by the JVM reader, not by hand"):
            mqc.read.format("mqindex").options(**served.options(**given), columnarPlan="{}").load().count()


@pytest.mark.parametrize("reader", ["jvm", "python"])
def test_one_dataframe_queried_with_and_without_filters_reads_each_querys_rows(mqc: Any, served: Served,  # noqa: F811
                                                                               reader: str) -> None:
    """Spark's Python data source keeps a DataFrame's first plan, pushed filters included, for its later queries;
    the source plans each query afresh (MqindexTable.newScanBuilder)."""
    want = len(spark_rows(mqc.read.format("mqindex").options(**served.options()).load()))
    df = mqc.read.format("mqindex").options(**served.options(), reader=reader).load()
    assert df.where("offset < 10").count() == 3 * 10
    assert df.count() == want
    assert 0 < df.where("partition = 1").count() < want
    # two scans of it in one query: each its own filters
    assert df.union(df.where("offset < 10")).count() == want + 3 * 10
    assert df.where("partition = 0").union(df.where("partition = 1")).count() == df.where("partition < 2").count()


def test_a_read_from_another_python_thread(mqc: Any, served: Served) -> None:  # noqa: F811
    import threading

    got: list[Any] = []

    def read() -> None:
        try:
            got.append(mqc.read.format("mqindex").options(**served.options()).load().count())
        except Exception as exc:  # noqa: BLE001 - reported below
            got.append(exc)

    t = threading.Thread(target=read)
    t.start()
    t.join(120)
    assert got == [len(spark_rows(mqc.read.format("mqindex").options(**served.options()).load()))], got


@pytest.fixture(scope="module")
def file_served(pg_url: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A `mqindex serve` with a file:// store, 3 partitions, 100 records of each codec."""
    base: Path = tmp_path_factory.mktemp("columnar-file")
    store_url, meta_url = f"file://{base}/objects", pg_url()
    server = KafkaServerProcess(base / "node", "--store", store_url, "--metadata", meta_url,
                                "--maintenance-interval-s", "0.2").start(timeout=180)
    try:
        with AdminClient({"bootstrap.servers": server.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
        for n, codec in enumerate(CODECS):
            p = Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": 5})
            for i in range(100):
                j = n * 100 + i
                p.produce(TOPIC, key=None if j % 7 == 0 else f"f-{j}".encode(),
                          value=None if j % 11 == 0 else f"{codec}:{j}".encode() * (1 + j % 5),
                          headers=[("h", None if j % 3 == 0 else b"\x01")] if j % 2 else None, partition=j % 3)
            assert p.flush(30) == 0
        s = Served(server, store_url, meta_url)
        marks = high_watermarks(server.bootstrap, TOPIC, 3)
        wait_for("every record uploaded", lambda: all(committed(s, TOPIC)[q][1] == marks[q][1] for q in range(3)),
                 timeout=60, interval=0.3)
        yield s
    finally:
        server.stop()


def test_file_store_served_rows_equal_a_kafka_consumer(spark: Any, file_served: Served) -> None:
    register(spark)
    ends = {p: e for p, (_s, e) in committed(file_served, TOPIC).items()}
    want = consume(file_served.server.bootstrap, TOPIC, ends)
    got, python = _both(spark, file_served, maxSplitBytes="2048")
    assert got == want == python and len(got) == 500
    assert {r[1].split(b":")[0] for r in got if r[1]} == {c.encode() for c in CODECS}


def test_tasks_are_sized_as_spark_sizes_a_file_source(spark: Any) -> None:
    """Without maxSplitBytes: min(spark.sql.files.maxPartitionBytes, max(openCostInBytes, bytes / parallelism))."""
    cores = spark.sparkContext.defaultParallelism
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    try:
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(96 << 20))
        assert columnar.task_bytes(spark, 10 << 30) == 96 << 20
        assert columnar.task_bytes(spark, cores * (40 << 20)) == 40 << 20
        assert columnar.task_bytes(spark, 1000) == 4 << 20  # openCostInBytes' default
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", before)
