"""spark.readStream.format("mqindex") (jobs/spark_source/stream.py) against a real `mqindex serve` (Kafka listener),
SeaweedFS and PostgreSQL, with Spark local[2]: where a query starts, a topic deleted under it, and a driver killed
mid-batch (a separate process, killed with its JVM) resuming from its checkpoint."""

from __future__ import annotations

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
    while (marks / "hold").exists():  # the test kills this driver here: the batch written, not committed
        time.sleep(0.1)

q = (spark.readStream.format("mqindex").options(**opts).load().writeStream.foreachBatch(sink)
     .option("checkpointLocation", ckpt).trigger(processingTime="200 milliseconds").start())
q.processAllAvailable()
q.stop()
spark.stop()
print("caught up", flush=True)
"""


def test_stream_resumes_from_its_checkpoint_after_its_driver_is_killed(served: Served, tmp_path: Path) -> None:
    """A driver killed with SIGKILL (with its JVM) after a micro-batch's output was written and before Spark
    committed the batch; restarted on the same checkpoint, it runs that batch again, then the records produced
    meanwhile: nothing skipped, nothing repeated."""
    topic = "stream"
    with AdminClient({"bootstrap.servers": served.server.bootstrap}) as admin:  # closed here, not by the collector
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    _produce_stream(served, topic, 0, 300)
    out, ckpt, marks = tmp_path / "out", tmp_path / "ckpt", tmp_path / "marks"
    marks.mkdir()
    (marks / "hold").touch()

    def driver() -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", _STREAM_DRIVER,
                                 json.dumps(served.options(topic, startingOffsets="earliest")), str(out), str(ckpt),
                                 str(marks)], cwd=Path(__file__).parents[2], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)

    first = driver()
    try:
        wait_for("the first micro-batch written", lambda: (marks / "written-0").exists() or first.poll() is not None,
                 timeout=180, interval=0.1)
        assert first.poll() is None, first.communicate()[1][-3000:]
        os.killpg(first.pid, signal.SIGKILL)  # the Python driver and its Spark JVM
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(30)
    _produce_stream(served, topic, 300, 200)
    (marks / "hold").unlink()
    second = driver()
    try:
        stdout, stderr = second.communicate(timeout=300)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(30)
    assert second.returncode == 0 and "caught up" in stdout, stderr[-3000:]
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


def test_stream_of_a_deleted_topic_fails_or_goes_on_without_it(mq: Any, served: Served, tmp_path: Path) -> None:
    """As Spark's Kafka source: failOnDataLoss=true (the default) fails the query naming the deleted topic; false
    goes on reading the other topics."""
    keep, gone = "stream-keep", "stream-gone"
    with AdminClient({"bootstrap.servers": served.server.bootstrap}) as admin:
        for f in admin.create_topics([NewTopic(keep, 2, 1), NewTopic(gone, 2, 1)]).values():
            f.result(30)
        _produce_stream(served, keep, 0, 50)
        _produce_stream(served, gone, 0, 50)

        def run(name: str, **kw: str) -> Any:
            def sink(batch: Any, batch_id: int) -> None:
                batch.select("topic", "value").write.mode("overwrite").parquet(str(tmp_path / name / f"b{batch_id}"))

            return (mq.readStream.format("mqindex")
                    .options(**served.options(f"{keep},{gone}", startingOffsets="earliest", **kw)).load()
                    .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / f"{name}-ckpt"))
                    .trigger(processingTime="200 milliseconds").start())

        strict, lenient = run("strict"), run("lenient", failOnDataLoss="false")
        try:
            strict.processAllAvailable()
            lenient.processAllAvailable()
            admin.delete_topics([gone])[gone].result(30)
            _produce_stream(served, keep, 50, 50)
            with pytest.raises(Exception, match="'stream-gone' was deleted while the query read it"):
                strict.awaitTermination(120)
            lenient.processAllAvailable()
            assert lenient.exception() is None
        finally:
            strict.stop()
            lenient.stop()
    rows = mq.read.parquet(*[str(d) for d in sorted((tmp_path / "lenient").iterdir())]).collect()
    assert sorted(int(r.value) for r in rows if r.topic == keep) == list(range(100))
    assert sorted(int(r.value) for r in rows if r.topic == gone) == list(range(50))
