"""A key predicate on a topic of 10^6 messages reads, through the cluster's key index, only the blocks holding
its hits: at least 100x fewer bytes than a scan of the topic, no more than a read told the hits' offsets, and
exactly the rows of the key (`mqindex serve` with its Kafka listener, SeaweedFS, PostgreSQL). Counted twice: by
the store meter of the functions Spark's tasks run, in this process, and by SeaweedFS itself for a query run by
Spark (the topic has a bucket of its own, whose every request the server counts).

An object block (about 1 MiB, closed by the first stream record past it) is the unit of a read, so the ratio
grows with the messages' size: the topic's 10^6 messages carry 160-byte values, sent in 256 KiB batches."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan

from jobs.spark_source import register
from jobs.spark_source.columnar import store_reads
from jobs.spark_source.index_lookup import key_hits
from jobs.spark_source.options import parse_options
from jobs.spark_source.plan import plan_scan
from jobs.spark_source.pushdown import Pushed, push
from jobs.spark_source.read import worker_store
from jobs.spark_source.source import plan_tasks, read_task
from storage_tier import MeterSnapshot
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess

pytestmark = pytest.mark.slow(seconds=30)

TOPIC = "million"
MESSAGES = 1_000_000
RUN = 10  # consecutive records share a key


@pytest.fixture(scope="module")
def million(seaweedfs: Any, pg_url: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, str]]:
    base: Path = tmp_path_factory.mktemp("spark-million")
    bucket = f"million-{uuid.uuid4().hex[:8]}"
    seaweedfs.make_bucket(bucket)
    store_url = seaweedfs.store_url(bucket, "topic")
    meta_url = pg_url()
    server = KafkaServerProcess(base / "node", "--store", store_url, "--metadata", meta_url).start(timeout=180)
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})  # kept until the result
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all", "linger.ms": 50,
                      "batch.size": 256 << 10, "queue.buffering.max.messages": 2_000_000,
                      "queue.buffering.max.kbytes": 1 << 20})
        # ~175 MB; the index reads the block holding a key's hits: 1 MiB and the producer batch that closed it
        value = b"v" * 160
        for i in range(MESSAGES):
            p.produce(TOPIC, value, b"k-%07d" % (i // RUN), 0)
            if i % 100_000 == 0:
                p.poll(0)
        assert p.flush(120) == 0
        del p, admin  # closed now, not after the server stopped (their reconnects would log errors)
        opts = {"metadata": meta_url, "store": store_url, "topic": TOPIC}
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "wm"})
        try:
            end = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
        finally:
            c.close()
        assert end == MESSAGES
        wait_for("every record uploaded", lambda: plan_scan(parse_options(opts)).ranges[0].committed_end == end,
                 timeout=180, interval=0.5)
        last = b"k-%07d" % ((MESSAGES - 1) // RUN)
        wait_for("the last key indexed", lambda: key_hits(server.url, TOPIC, [last]).get(0), timeout=180, interval=0.5)
        yield {**opts, "url": server.url, "bucket": bucket}
    finally:
        server.stop()


def source_options(million: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in million.items() if k not in ("url", "bucket")}


def read(million: dict[str, str], *filters: Any, **kw: str) -> tuple[MeterSnapshot, list[int]]:
    """(store requests and bytes, offsets of the rows) of a read run through the functions Spark's tasks run."""
    opts = parse_options(source_options(million) | kw)
    pushed = Pushed()
    assert not list(push(pushed, filters))
    store = worker_store(opts.store_url)
    before = store.meter.snapshot()
    offsets: list[int] = []
    for task in plan_tasks(opts, pushed):
        for rb in read_task(opts, task, pushed, arrow=True):
            offsets += rb.column("offset").to_pylist() if filters else [0] * rb.num_rows
    return store.meter.snapshot() - before, offsets


def test_key_predicate_at_a_million_messages_reads_only_its_hits_blocks(million: dict[str, str]) -> None:
    k = 61_234
    key = b"k-%07d" % k
    t0 = time.monotonic()
    keyed, rows = read(million, EqualTo(("key",), key), index=million["url"])
    keyed_s = time.monotonic() - t0
    assert sorted(rows) == list(range(k * RUN, (k + 1) * RUN))
    exact, exact_rows = read(million, GreaterThanOrEqual(("offset",), k * RUN), LessThan(("offset",), (k + 1) * RUN))
    assert sorted(exact_rows) == sorted(rows)
    t0 = time.monotonic()
    scan, scanned = read(million)
    scan_s = time.monotonic() - t0
    assert len(scanned) == MESSAGES
    print(f"key predicate at {MESSAGES:,} messages: {keyed.bytes_out:,} bytes in {keyed['GET']} GETs "
          f"({keyed_s:.2f} s); the hits' offsets {exact.bytes_out:,} bytes in {exact['GET']} GETs; scan "
          f"{scan.bytes_out:,} bytes in {scan['GET']} GETs ({scan_s:.2f} s): {scan.bytes_out / keyed.bytes_out:.0f}x")
    assert keyed.bytes_out <= exact.bytes_out, (keyed, exact)
    assert keyed["GET"] <= 2, keyed
    assert scan.bytes_out >= 100 * keyed.bytes_out, (keyed, scan)


def test_key_predicate_run_by_spark_asks_the_store_100x_fewer_bytes(spark: Any, million: dict[str, str],
                                                                       seaweedfs: Any) -> None:
    """The same through `spark.read.format("mqindex")`, with what SeaweedFS served the bucket meanwhile: the key
    query (read through the index by the Python half's tasks) against a full read by the JVM reader. The key
    query's figure also holds whatever the server asked of the bucket at the time (its store probes, index files):
    that only makes the ratio harder to reach."""
    register(spark)
    k = 71_234  # not the key of the test before: its block is in no cache of the node
    bucket = million["bucket"]
    keyed_df = spark.read.format("mqindex").options(**source_options(million), index=million["url"]).load() \
        .where(F.col("key") == b"k-%07d" % k)
    before = seaweedfs.bucket_traffic(bucket)
    offsets = sorted(r.offset for r in keyed_df.collect())
    keyed = seaweedfs.bucket_traffic(bucket) - before
    assert offsets == list(range(k * RUN, (k + 1) * RUN))
    scan_df = spark.read.format("mqindex").options(**source_options(million)).load().select("offset", "value")
    counted = scan_df.where(F.length("value") == 160).agg(F.count("*").alias("n"))
    before = seaweedfs.bucket_traffic(bucket)
    assert counted.collect()[0].n == MESSAGES
    scan = seaweedfs.bucket_traffic(bucket) - before
    # the JVM reader's own count of its reads (the scan's metrics in Spark's UI) is what the server saw
    jvm = store_reads(counted)
    assert 0 < jvm.gets <= scan.requests["GET"] and 0 < jvm.bytes <= scan.sent_bytes, (jvm, scan)
    assert jvm.bytes >= 0.99 * scan.sent_bytes, (jvm, scan)
    print(f"key predicate run by Spark at {MESSAGES:,} messages: SeaweedFS sent {keyed.sent_bytes:,} bytes for "
          f"{keyed.requests.get('GET', 0)} GETs; a full read by the JVM reader {scan.sent_bytes:,} bytes for "
          f"{scan.requests.get('GET', 0)} GETs: {scan.sent_bytes / max(1, keyed.sent_bytes):.0f}x")
    assert keyed.sent_bytes > 0 and scan.sent_bytes >= 100 * keyed.sent_bytes, (keyed, scan)
