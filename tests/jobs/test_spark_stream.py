"""spark.readStream.format("mqindex") (jobs/spark_source/stream.py) against a real `mqindex serve` (Kafka listener),
SeaweedFS and PostgreSQL, with Spark local[2]: where a query starts, a topic deleted under it, and a driver killed
mid-batch (a separate process, killed with its JVM) resuming from its checkpoint."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.spark_source import register
from tests.api.server import wait_for
from tests.jobs.test_spark_source import Served, _produce_stream
from tests.kafka.conftest import KafkaServerProcess


@pytest.fixture(scope="module")
def served(seaweedfs: Any, pg_url: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base: Path = tmp_path_factory.mktemp("spark-stream")
    store_url = seaweedfs.store_url("mqindex", f"stream-{uuid.uuid4().hex[:8]}")
    meta_url = pg_url()
    server = KafkaServerProcess(base / "node", "--store", store_url, "--metadata", meta_url,
                                "--maintenance-interval-s", "0.2").start(timeout=180)
    try:
        yield Served(server, store_url, meta_url)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mq(spark: Any, served: Served) -> Any:
    register(spark)
    return spark


_STREAM_DRIVER = """
import json, os, sys, time
from pathlib import Path
from pyspark.sql import SparkSession
from jobs.spark_session import DAEMON_CONF, EXECUTOR_DAEMON
from jobs.spark_source import register

opts, out, ckpt, marks = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
os.environ["PYSPARK_PYTHON"] = sys.executable
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config(DAEMON_CONF, EXECUTOR_DAEMON).config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)

def sink(batch, batch_id):  # idempotent per batch id, as a sink must be
    batch.select("partition", "offset", "value").write.mode("overwrite").parquet(str(out / f"b{batch_id}"))
    (marks / f"written-{batch_id}").touch()
    while True:  # the test kills this driver here: the batch written, not committed
        time.sleep(0.1)

q = (spark.readStream.format("mqindex").options(**opts).load().writeStream.foreachBatch(sink)
     .option("checkpointLocation", ckpt).trigger(processingTime="200 milliseconds").start())
q.awaitTermination()
"""


@pytest.mark.slow(seconds=45)
def test_stream_resumes_from_its_checkpoint_after_its_driver_is_killed(mq: Any, served: Served, tmp_path: Path
                                                                      ) -> None:
    """A driver (a process of its own) killed with SIGKILL, with its JVM, after a micro-batch's output was written
    and before Spark committed the batch; the query restarted on the same checkpoint (in this process's session)
    runs that batch again, then the records produced meanwhile: nothing skipped, nothing repeated."""
    topic = "stream"
    with AdminClient({"bootstrap.servers": served.server.bootstrap}) as admin:  # closed here, not by the collector
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    _produce_stream(served, topic, 0, 300)
    out, ckpt, marks = tmp_path / "out", tmp_path / "ckpt", tmp_path / "marks"
    marks.mkdir()
    opts = served.options(topic, startingOffsets="earliest")
    with open(tmp_path / "driver.out", "wb") as stdout, open(tmp_path / "driver.err", "wb") as stderr:
        # its output in files: pipes not read would fill and block it
        driver = subprocess.Popen([sys.executable, "-c", _STREAM_DRIVER, json.dumps(opts), str(out), str(ckpt),
                                   str(marks)], cwd=Path(__file__).parents[2], stdout=stdout, stderr=stderr,
                                  start_new_session=True)
    try:
        wait_for("the first micro-batch written", lambda: (marks / "written-0").exists() or driver.poll() is not None,
                 timeout=180, interval=0.1)
        assert driver.poll() is None, (tmp_path / "driver.err").read_text(errors="replace")[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):  # (none left when the driver failed and its JVM ended)
            os.killpg(driver.pid, signal.SIGKILL)  # the Python driver and its Spark JVM
        driver.wait(30)
    _produce_stream(served, topic, 300, 200)

    def sink(batch: Any, batch_id: int) -> None:  # the driver's sink
        batch.select("partition", "offset", "value").write.mode("overwrite").parquet(str(out / f"b{batch_id}"))
        (marks / f"written-{batch_id}").touch()

    q = (mq.readStream.format("mqindex").options(**opts).load().writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(ckpt)).trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert (marks / "written-1").exists()  # the batch after the killed one ran too
    rows = [r for d in sorted(out.iterdir()) for r in pq.read_table(d).to_pylist()]
    assert sorted(int(r["value"]) for r in rows) == list(range(500))  # nothing skipped, nothing repeated
    assert len({(r["partition"], r["offset"]) for r in rows}) == 500


def test_stream_without_starting_offsets_starts_at_the_latest(mq: Any, served: Served, tmp_path: Path) -> None:
    """As Spark's Kafka source streams: records committed before the query started are not read."""
    topic = "stream-latest"
    with AdminClient({"bootstrap.servers": served.server.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    _produce_stream(served, topic, 0, 200)
    out = tmp_path / "out"

    def sink(batch: Any, batch_id: int) -> None:
        batch.select("value").write.mode("overwrite").parquet(str(out / f"b{batch_id}"))

    q = (mq.readStream.format("mqindex").options(**served.options(topic)).load().writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="200 milliseconds").start())
    try:
        q.processAllAvailable()
        _produce_stream(served, topic, 200, 100)
        q.processAllAvailable()
    finally:
        q.stop()
    rows = mq.read.parquet(*[str(d) for d in sorted(out.iterdir())]).collect() if out.exists() else []
    assert sorted(int(r.value) for r in rows) == list(range(200, 300))


def _query(mq: Any, served: Served, topics: str, out: Path, **kw: str) -> Any:
    """A streaming query of `topics` from the earliest offsets, each micro-batch's topic and value written under
    `out` per batch id, checkpointed beside it."""
    def sink(batch: Any, batch_id: int) -> None:
        batch.select("topic", "value").write.mode("overwrite").parquet(str(out / f"b{batch_id}"))

    return (mq.readStream.format("mqindex").options(**served.options(topics, startingOffsets="earliest", **kw))
            .load().writeStream.foreachBatch(sink).option("checkpointLocation", f"{out}-ckpt")
            .trigger(processingTime="200 milliseconds").start())


def _values(mq: Any, out: Path, topic: str) -> list[int]:
    return sorted(int(r.value) for d in sorted(out.iterdir()) for r in mq.read.parquet(str(d)).collect()
                  if r.topic == topic)


def test_stream_of_a_deleted_topic_fails_or_goes_on_without_it(mq: Any, served: Served, tmp_path: Path) -> None:
    """As Spark's Kafka source: failOnDataLoss=true (the default) fails the query naming the deleted topic; false
    goes on reading the other topics, also after a restart with the same options."""
    keep, gone = "stream-keep", "stream-gone"
    strict_out, lenient_out = tmp_path / "strict", tmp_path / "lenient"
    with AdminClient({"bootstrap.servers": served.server.bootstrap}) as admin:
        for f in admin.create_topics([NewTopic(keep, 2, 1), NewTopic(gone, 2, 1)]).values():
            f.result(30)
        _produce_stream(served, keep, 0, 50)
        _produce_stream(served, gone, 0, 50)
        strict = _query(mq, served, f"{keep},{gone}", strict_out)
        lenient = _query(mq, served, f"{keep},{gone}", lenient_out, failOnDataLoss="false")
        try:
            strict.processAllAvailable()
            lenient.processAllAvailable()
            admin.delete_topics([gone])[gone].result(30)
            _produce_stream(served, keep, 50, 50)
            with pytest.raises(Exception, match="'stream-gone' was deleted while the query read it"):
                strict.awaitTermination(120)
            lenient.processAllAvailable()
            assert lenient.exception() is None
            lenient.stop()
            _produce_stream(served, keep, 100, 50)
            lenient = _query(mq, served, f"{keep},{gone}", lenient_out, failOnDataLoss="false")  # restarted
            lenient.processAllAvailable()
            assert lenient.exception() is None
        finally:
            strict.stop()
            lenient.stop()
    assert _values(mq, lenient_out, keep) == list(range(150))
    assert _values(mq, lenient_out, gone) == list(range(50))


def test_stream_of_a_topic_made_again_fails_or_reads_it_from_its_earliest(mq: Any, served: Served,
                                                                          tmp_path: Path) -> None:
    """A topic deleted and made again while its queries were stopped: its offsets went back (50 records read of
    each partition, 10 there now). failOnDataLoss=true fails the query; false reads the new topic from its
    earliest offset, and skips none of it."""
    topic = "stream-again"
    strict_out, lenient_out = tmp_path / "strict", tmp_path / "lenient"
    with AdminClient({"bootstrap.servers": served.server.bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        _produce_stream(served, topic, 0, 100)
        for out, kw in ((strict_out, {}), (lenient_out, {"failOnDataLoss": "false"})):
            q = _query(mq, served, topic, out, **kw)
            try:
                q.processAllAvailable()
            finally:
                q.stop()
        admin.delete_topics([topic])[topic].result(30)
        wait_for(f"{topic} gone", lambda: topic not in admin.list_topics(timeout=10).topics, timeout=30)
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    _produce_stream(served, topic, 1000, 20)
    strict = _query(mq, served, topic, strict_out)
    lenient = _query(mq, served, topic, lenient_out, failOnDataLoss="false")
    try:
        with pytest.raises(Exception, match="the offset went back from 50 to 10"):
            strict.awaitTermination(120)
        lenient.processAllAvailable()
        assert lenient.exception() is None
    finally:
        strict.stop()
        lenient.stop()
    assert _values(mq, lenient_out, topic) == [*range(100), *range(1000, 1020)]
