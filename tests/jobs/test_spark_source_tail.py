"""A batch read given `kafka.bootstrap.servers` reads each partition to its high watermark: the objects, then the
records still only in the node's WAL and log cache through Kafka; without it the read ends at the committed end,
as the plan says. A real `mqindex serve` (Kafka listener, SeaweedFS, PostgreSQL), restarted with an upload interval
of an hour so that the second round of records stays in its WAL; Spark local[2]."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.spark_source import register
from jobs.spark_source.options import SourceOptionError, parse_options
from jobs.spark_source.plan import plan_scan
from tests.api.server import wait_for
from tests.jobs.test_spark_source import Row, consume, high_watermarks, spark_rows
from tests.kafka.conftest import KafkaServerProcess

TOPIC = "tailed"
PARTITIONS = 2
STORED = 300  # records per partition uploaded before the restart
LATE = 25  # records per partition produced after it: only in the WAL
TXN = 5  # then records of a committed transaction on partition 1: its last offset is the commit marker


class Tailed:
    def __init__(self, server: KafkaServerProcess, opts: dict[str, str]) -> None:
        self.server, self.opts = server, opts

    def options(self, **kw: str) -> dict[str, str]:
        return {**self.opts, **kw}

    def committed(self) -> dict[int, int]:
        return {r.partition: r.committed_end for r in plan_scan(parse_options(self.opts)).ranges}


def _produce(bootstrap: str, prefix: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for part in range(PARTITIONS):
        for i in range(n):
            p.produce(TOPIC, key=f"{prefix}-{part}-{i}".encode(), value=b"%s:%d" % (prefix.encode(), i) * (i % 5 + 1),
                      headers=[("KEYS", f"{prefix}-group-{i % 4}".encode()), ("n", None)] if i % 3 else None,
                      partition=part)
    assert p.flush(30) == 0


@pytest.fixture(scope="module")
def tailed(seaweedfs: Any, pg_url: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tailed]:
    base: Path = tmp_path_factory.mktemp("spark-tail")
    store, meta = seaweedfs.store_url("mqindex", f"tail-{uuid.uuid4().hex[:8]}"), pg_url()
    opts = {"metadata": meta, "store": store, "topic": TOPIC}
    first = KafkaServerProcess(base / "node", "--store", store, "--metadata", meta).start(timeout=180)
    try:
        admin = AdminClient({"bootstrap.servers": first.bootstrap})  # kept until the result
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        _produce(first.bootstrap, "early", STORED)
        del admin
        t = Tailed(first, opts)
        wait_for("every early record uploaded", lambda: t.committed() == dict.fromkeys(range(PARTITIONS), STORED),
                 timeout=60, interval=0.3)
    finally:
        first.stop()
    server = KafkaServerProcess(base / "node", "--store", store, "--metadata", meta,
                                "--upload-interval-s", "3600").start(timeout=180)  # the last flag wins
    try:
        _produce(server.bootstrap, "late", LATE)
        txn = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"tail-{uuid.uuid4().hex[:6]}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(TXN):
            txn.produce(TOPIC, key=f"txn-{i}".encode(), value=b"in a transaction", partition=1)
        txn.commit_transaction(30)
        del txn
        t = Tailed(server, opts)
        assert t.committed() == dict.fromkeys(range(PARTITIONS), STORED)  # the late records are in the WAL only
        yield t
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mq(spark: Any, tailed: Tailed) -> Any:
    register(spark)
    return spark


def _everything(t: Tailed) -> list[Row]:
    """Every record, as a Kafka consumer reads them (to the last record: partition 1 ends with a commit marker)."""
    marks = high_watermarks(t.server.bootstrap, TOPIC, PARTITIONS)
    assert {p: e for p, (_s, e) in marks.items()} == {0: STORED + LATE, 1: STORED + LATE + TXN + 1}
    return consume(t.server.bootstrap, TOPIC, {0: STORED + LATE, 1: STORED + LATE + TXN})


def test_without_the_option_a_read_ends_at_the_committed_end_and_says_so(mq: Any, tailed: Tailed) -> None:
    every = _everything(tailed)
    got = spark_rows(mq.read.format("mqindex").options(**tailed.options()).load())
    assert got == [r for r in every if r[4] < STORED]
    plan = plan_scan(parse_options(tailed.options()))
    assert plan.describe()["read_to"] == {f"{TOPIC}/{p}": STORED for p in range(PARTITIONS)}
    assert plan.tails == []


def test_with_kafka_bootstrap_servers_a_read_reaches_the_high_watermark(mq: Any, tailed: Tailed) -> None:
    every = _everything(tailed)
    opts = tailed.options(**{"kafka.bootstrap.servers": tailed.server.bootstrap})
    plan = plan_scan(parse_options(opts))
    assert plan.describe()["read_to"] == {f"{TOPIC}/0": STORED + LATE, f"{TOPIC}/1": STORED + LATE + TXN + 1}
    assert plan.describe()["tail_offsets"] == PARTITIONS * LATE + TXN + 1
    # every column, headers included; the tail of partition 1 ends with a control record, which gives no row
    assert spark_rows(mq.read.format("mqindex").options(**opts).load()) == every
    assert [r[0] for r in every if r[3] == 1][-TXN:] == [f"txn-{i}".encode() for i in range(TXN)]
    # a range that starts in the objects and ends in the tail, and one wholly in the tail
    ranged = opts | {"startingOffsets": f'{{"{TOPIC}": {{"0": {STORED - 5}, "1": {STORED + 3}}}}}',
                     "endingOffsets": f'{{"{TOPIC}": {{"0": {STORED + 7}, "1": -1}}}}'}
    want = [r for r in every if (r[3] == 0 and STORED - 5 <= r[4] < STORED + 7) or (r[3] == 1 and r[4] >= STORED + 3)]
    assert spark_rows(mq.read.format("mqindex").options(**ranged).load()) == want
    # filters Spark pushes apply to the tail's rows too
    df = mq.read.format("mqindex").options(**opts).load().where(f"partition = 1 AND offset >= {STORED + 20}")
    assert spark_rows(df) == [r for r in every if r[3] == 1 and r[4] >= STORED + 20]


def test_a_key_in_the_tail_is_found_through_the_index(mq: Any, tailed: Tailed) -> None:
    every = _everything(tailed)
    url = tailed.server.url
    wait_for("the late records indexed", lambda: plan_keyed(tailed, url, b"late-1-24") == 1, timeout=60,
             interval=0.3)
    opts = tailed.options(**{"kafka.bootstrap.servers": tailed.server.bootstrap}, index=url)
    for key in (b"late-1-24", b"early-0-7"):
        got = spark_rows(mq.read.format("mqindex").options(**opts).load().where(f"key = '{key.decode()}'"))
        assert got == [r for r in every if r[0] == key] != []
    # records indexed under a KEYS part, in the objects and in the tail
    both = spark_rows(mq.read.format("mqindex").options(**opts, indexKeys="late-group-2,early-group-1").load())
    assert both == [r for r in every if any(k == "KEYS" and v in (b"late-group-2", b"early-group-1")
                                            for k, v in r[7])] != []
    # without the option the tail's key has no row (the read ends at the committed end)
    assert mq.read.format("mqindex").options(**tailed.options(index=url)).load() \
        .where("key = 'late-1-24'").count() == 0


def plan_keyed(t: Tailed, url: str, key: bytes) -> int:
    from jobs.spark_source.pushdown import Pushed
    from jobs.spark_source.source import plan_tasks

    pushed = Pushed(keys=frozenset([key]))
    opts = parse_options(t.options(**{"kafka.bootstrap.servers": t.server.bootstrap}, index=url))
    return sum(len(o) for task in plan_tasks(opts, pushed) for o in (task.offsets or {}).values())


def test_bad_kafka_options_are_named(mq: Any, tailed: Tailed) -> None:
    boot = {"kafka.bootstrap.servers": tailed.server.bootstrap}
    with pytest.raises(SourceOptionError, match="kafka.isolation.level: only read_uncommitted"):
        parse_options(tailed.options(**boot, **{"kafka.isolation.level": "read_committed"}))
    with pytest.raises(SourceOptionError, match="kafka.bootstrap.servers: required"):
        parse_options(tailed.options(**{"kafka.client.id": "x"}))
    with pytest.raises(SourceOptionError, match="kafka.bootstrap.servers: a stream reads"):
        parse_options(tailed.options(**boot), stream=True)
    with pytest.raises(SourceOptionError, match="kafka.bootstrap.servers: 127.0.0.1:1 did not give the high water"):
        plan_scan(parse_options(tailed.options(**{"kafka.bootstrap.servers": "127.0.0.1:1",  # nothing listens
                                                  "kafka.socket.timeout.ms": "2000"})))  # waited for 2 s, not 30
    with pytest.raises(Exception, match="reader=python"):
        mq.read.format("mqindex").options(**tailed.options(**boot, reader="jvm")).load().collect()
