"""`df.write.format("mqindex")` produces a DataFrame's rows through the cluster: two `mqindex serve` nodes
(Kafka listeners, one PostgreSQL metadata database, one SeaweedFS bucket), Spark local[2]. Every row comes
back by key from either node, once, with its value, headers and partition, and `spark.read.format("mqindex")`
reads them back from both nodes' objects as a Kafka consumer does, a key predicate answered through either
node's cluster-wide index; bad options and columns are named before anything is produced."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType

from jobs.spark_source import register
from jobs.spark_write import WriteOptionError
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess

TOPIC = "written"
PARTITIONS = 4
ROWS = 600

SCHEMA = StructType([
    StructField("key", StringType()), StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType(), False),
                                                 StructField("value", BinaryType())]))),
    StructField("partition", IntegerType()), StructField("offset", LongType()),  # offset: ignored
])


class TwoNodes(list[KafkaServerProcess]):
    """The nodes, and the store and metadata they share."""

    store = ""
    meta = ""


@pytest.fixture(scope="module")
def two_nodes(seaweedfs: SeaweedFS, pg_url: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[TwoNodes]:
    base: Path = tmp_path_factory.mktemp("spark-write")
    store, meta = seaweedfs.store_url("mqindex", f"write-{uuid.uuid4().hex[:8]}"), pg_url()
    nodes = TwoNodes()
    nodes.store, nodes.meta = store, meta
    try:
        for i in range(2):
            node = KafkaServerProcess(base / f"node{i}", "--store", store, "--metadata", meta, "--node-id", str(i),
                                      "--lease-ms", "10000")  # a loaded machine: no lease lost
            nodes.append(node)
            node.start(timeout=180)
        admin = AdminClient({"bootstrap.servers": nodes[0].bootstrap})  # kept until the result
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        yield nodes
    finally:
        for node in nodes:
            if node.proc is not None:
                node.stop()


def _rows() -> list[tuple[Any, ...]]:
    out = []
    for i in range(ROWS):
        headers = [("KEYS", f"batch-{i % 7}".encode()), ("trace", None if i % 3 else b"\x00\xff")] if i % 2 else None
        out.append((f"w-{i}", b"value-%d" % i if i % 11 else None, headers, 3 if i % 5 == 0 else None, 999))
    return out


def _by_key(node: KafkaServerProcess, key: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{node.url}/v1/messages", params={"topic": TOPIC, "key": key, "max": 10}, timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


def _consume(bootstrap: str) -> list[tuple[Any, ...]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(PARTITIONS)}
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS) if ends[p]])
        out: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + 60
        while len(out) < sum(ends.values()) and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                out.append((m.key().decode(), m.value(), m.headers() or None, m.partition()))
        assert len(out) == sum(ends.values()), (len(out), ends)
        return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def written(spark: Any, two_nodes: TwoNodes) -> list[tuple[Any, ...]]:
    """The rows, written once through both nodes."""
    register(spark)
    rows = _rows()
    df = spark.createDataFrame(rows, SCHEMA).repartition(3)
    bootstrap = ",".join(n.bootstrap for n in two_nodes)
    df.write.format("mqindex").mode("append").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", TOPIC).save()
    return rows


def test_written_rows_come_back_by_key_from_either_node(two_nodes: TwoNodes, written: list[tuple[Any, ...]]
                                                        ) -> None:
    rows = written

    got = sorted(_consume(two_nodes[1].bootstrap), key=lambda r: int(r[0][2:]))
    assert [(k, v, [tuple(h) for h in hs] if hs else None) for k, v, hs, _p in got] == \
        [(k, v, hs) for k, v, hs, _p, _o in rows]  # each row once, headers as written
    assert all(p == 3 for k, _v, _h, p in got if int(k[2:]) % 5 == 0)
    assert len({p for _k, _v, _h, p in got}) == PARTITIONS  # the others spread by the key's partitioner

    for i in (0, 1, 7, 11, 599):
        for node in two_nodes:
            wait_for(f"w-{i} indexed on {node.url}", lambda node=node, i=i: _by_key(node, f"w-{i}"), timeout=60,
                     interval=0.3)
            (m,) = _by_key(node, f"w-{i}")
            assert (m["value"].encode() if m["value"] is not None else None) == rows[i][1]
            assert m["headers"] == ({k: (v or b"").decode(errors="replace") for k, v in rows[i][2]}
                                    if rows[i][2] else {})
    # a KEYS header part is indexed too: every row written with batch-3 comes back by it
    want = sorted(f"w-{i}" for i in range(ROWS) if i % 2 and i % 7 == 3)
    for node in two_nodes:
        wait_for(f"batch-3 indexed on {node.url}", lambda node=node: len(_page(node, "batch-3")) == len(want),
                 timeout=60, interval=0.3)
        assert sorted(m["key"] for m in _page(node, "batch-3")) == want


def test_spark_reads_both_nodes_objects_as_a_consumer_does(spark: Any, two_nodes: TwoNodes,
                                                            written: list[tuple[Any, ...]]) -> None:
    """A batch read plans from the shared metadata and reads the objects each node uploaded for the partitions it
    leads; a key predicate through one node's index finds a record of a partition the other node leads."""
    from confluent_kafka.admin import AdminClient

    from jobs.spark_source.options import parse_options
    from jobs.spark_source.plan import plan_scan

    meta = AdminClient({"bootstrap.servers": two_nodes[0].bootstrap}).list_topics(TOPIC, timeout=30)
    leaders = {p.id: p.leader for p in meta.topics[TOPIC].partitions.values()}
    assert set(leaders.values()) == {0, 1}, leaders  # both nodes lead partitions of the topic
    opts = {"metadata": two_nodes.meta, "store": two_nodes.store, "topic": TOPIC}
    consumed = _consume(two_nodes[0].bootstrap)
    ends: dict[int, int] = {}
    for _k, _v, _h, p in consumed:
        ends[p] = ends.get(p, 0) + 1
    wait_for("both nodes uploaded every record", lambda: {
        r.partition: r.committed_end for r in plan_scan(parse_options(opts)).ranges if r.committed_end} == ends,
        timeout=60, interval=0.3)
    got = spark.read.format("mqindex").options(**opts).load().collect()
    assert sorted((r.key.decode(), r.value, [tuple(h) for h in r.headers] or None, r.partition) for r in got) == \
        sorted((k, v, [tuple(h) for h in hs] if hs else None, p) for k, v, hs, p in consumed)
    assert sorted((r.partition, r.offset) for r in got) == sorted((p, o) for p, n in ends.items() for o in range(n))
    picks: dict[int, tuple[int, int]] = {}  # leader -> (row, partition) of a record of a partition it leads
    for k, _v, _h, p in consumed:
        picks.setdefault(leaders[p], (int(k[2:]), p))
    for leader, (i, part) in picks.items():
        for node in two_nodes:  # the node leading the partition, and the other
            one = spark.read.format("mqindex").options(**opts, index=node.url).load().where(f"key = 'w-{i}'")
            assert [(r.partition, r.value) for r in one.collect()] == [(part, written[i][1])], (leader, i, node.url)


def _page(node: KafkaServerProcess, key: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{node.url}/v1/messages", params={"topic": TOPIC, "key": key, "max": 1000}, timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


def test_bad_write_options_and_columns_are_named(spark: Any, two_nodes: TwoNodes) -> None:
    register(spark)
    df = spark.createDataFrame([("k", b"v")], "key string, value binary")
    boot = two_nodes[0].bootstrap

    def fails(frame: Any, match: str, mode: str = "append", **opts: str) -> None:
        with pytest.raises(Exception, match=match):
            frame.write.format("mqindex").mode(mode).options(**opts).save()

    fails(df, "kafka.bootstrap.servers: required", topic=TOPIC)
    fails(df, "topic: give the topic option", **{"kafka.bootstrap.servers": boot})
    fails(df, "appended to, not overwritten", mode="overwrite", topic=TOPIC, **{"kafka.bootstrap.servers": boot})
    fails(spark.createDataFrame([("k",)], "key string"), "column value: required", topic=TOPIC,
          **{"kafka.bootstrap.servers": boot})
    fails(spark.createDataFrame([(1, b"v")], "key int, value binary"), "column key: must be binary or string",
          topic=TOPIC, **{"kafka.bootstrap.servers": boot})
    fails(df, "always produces with acks", topic=TOPIC, **{"kafka.bootstrap.servers": boot, "kafka.acks": "1"})
    with pytest.raises(WriteOptionError):
        from jobs.spark_write import parse_write_options
        parse_write_options({"topic": TOPIC})
