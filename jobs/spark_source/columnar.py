"""Batch reads of topics by the JVM columnar reader: `jobs.spark_source.columnar.read(spark, **options)`.

The Python data source (`spark.read.format("mqindex")`) hands Spark Arrow batches that the JVM turns into rows
one by one; pyspark's Python Data Source API has no columnar path. This read plans in Python, exactly as the
Python source does (plan.py: the same options, offset and time pruning, splits and tasks), and hands the plan
as JSON to a Spark DataSource V2 in the JVM (jobs/spark_source/jvm, `io.mqindex.spark.ColumnarSource`) whose
tasks fetch the objects' blocks with ranged GETs and decode their record batches into ColumnarBatch (Spark's
own column vectors, as its Parquet reader fills them), building only the columns the query uses.

The JVM has no AWS SDK: for an s3:// store each object is given to it as a presigned GET URL
(`generate_presigned_url`, valid `PRESIGN_SECONDS`), for a file:// store as a file URL. The jar is built by
`make jobs/spark_source/jvm/mqindex-spark.jar` (jobs/spark_source/jvm/build.sh; `make test` and `make bench` do
it) and added to the session here (`ADD JAR`) when its classes are not loadable yet; `spark.jars` at session start
does the same for a session started elsewhere.

Not taken here (the Python source keeps them): streaming reads, writes, `index` / `indexKeys`, the tail past
the committed end (`kafka.bootstrap.servers`) and filter pushdown (filters run in Spark over the rows read;
bound a read by offsets or time with the options).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jobs.spark_source.options import SourceOptionError, SourceOptions, _get, parse_options
from jobs.spark_source.plan import Bounds, ScanPlan, Split, in_waves, plan_scan
from jobs.spark_source.read import worker_store
from storage_tier import BlobStore

JAR = Path(__file__).parent / "jvm" / "mqindex-spark.jar"
SOURCE_CLASS = "io.mqindex.spark.ColumnarSource"
PLAN_OPTION = "columnarPlan"  # the JVM half asks the Python half for its plan with this option
PRESIGN_SECONDS = 12 * 3600  # a presigned URL's life: a read's tasks must start within it

__all__ = ["JAR", "PLAN_OPTION", "SOURCE_CLASS", "StoreReads", "TaskSizing", "add_jar", "object_url", "plan_json",
           "plan_tasks", "read", "read_tasks", "store_reads", "task_bytes"]


def add_jar(spark: Any) -> None:
    """Makes the reader's classes loadable in this session, on every thread: `ADD JAR` (which ships the jar to
    the executors) unless the session's context lists it already (`spark.jars` at start, or an earlier call), and
    the jar added to the driver's application class loader, Spark's MutableURLClassLoader, where `spark.jars`
    puts it. `ADD JAR` alone serves only the JVM thread that ran it, and PySpark gives each Python thread a JVM
    thread of its own: without the second step, `format("mqindex")` from another Python thread finds no such
    source."""
    jvm = spark.sparkContext._jvm
    here = jvm.Thread.currentThread().getContextClassLoader()
    mutable = jvm.java.lang.Class.forName("org.apache.spark.util.MutableURLClassLoader")
    base = here  # the first MutableURLClassLoader up the chain that is not ADD JAR's own (NonClosable...)
    while base is not None and (not mutable.isInstance(base) or "NonClosable" in base.getClass().getName()):
        base = base.getParent()

    def loadable(loader: Any) -> bool:
        try:
            jvm.java.lang.Class.forName(SOURCE_CLASS, False, loader)
            return True
        except Exception:  # noqa: BLE001 - py4j's error for a class not found
            return False

    listed = str(spark.sparkContext._jsc.sc().listJars().mkString("\n")).split("\n")
    if not any(j.endswith("/" + JAR.name) for j in listed):
        if not JAR.is_file():
            if loadable(here):  # on the classpath some other way (a jar of another name in spark.jars)
                return
            raise FileNotFoundError(f"{JAR} is not built: run `make {JAR.relative_to(JAR.parents[3])}` (it runs "
                                    "jobs/spark_source/jvm/build.sh; needs a JDK 17)")
        spark.sql(f"ADD JAR '{JAR}'")
    if base is not None and not loadable(base) and JAR.is_file():
        base.addURL(jvm.java.io.File(str(JAR)).toURI().toURL())


def object_url(store: BlobStore, key: str, expires_s: int = PRESIGN_SECONDS) -> str:
    """Where the JVM reads an object: a presigned GET URL (S3) or a file URL (local store)."""
    from storage_tier.local_store import LocalStore
    from storage_tier.s3_store import S3Store

    if isinstance(store, S3Store):
        return str(store.client.generate_presigned_url(
            "get_object", Params={"Bucket": store.bucket, "Key": store.prefix + key}, ExpiresIn=expires_s))
    if isinstance(store, LocalStore):
        return (store.root / key).as_uri()
    raise SourceOptionError(f"store: the JVM reader reads s3://, oss:// and file:// stores, not {store.url}; read it "
                            "with spark.read.format('mqindex') and reader=python")


def plan_json(store: BlobStore, tasks: Sequence[Sequence[Split]], lo_ms: int | None, hi_ms: int | None,
              get_bytes: int | None = None) -> str:
    """The plan the JVM reader takes (jobs/spark_source/jvm/.../ReadPlan.java). `get_bytes`: the GETs are cut at
    multiples of this many bytes of an object (default: the reader's, 16 MiB, two of an object's parts)."""
    urls: dict[str, str] = {}

    def split(s: Split) -> dict[str, Any]:
        if s.key not in urls:
            urls[s.key] = object_url(store, s.key)
        return {"topic": s.topic, "partition": s.partition, "stream": s.stream_id, "key": s.key,
                "url": urls[s.key], "size": s.size, "start": s.start, "end": s.end}

    plan: dict[str, Any] = {"lo_ms": lo_ms, "hi_ms": hi_ms, "tasks": [[split(s) for s in t] for t in tasks]}
    if get_bytes is not None:
        plan["get_bytes"] = get_bytes
    return json.dumps(plan)


def read_tasks(spark: Any, store_url: str, tasks: Sequence[Sequence[Split]], lo_ms: int | None = None,
               hi_ms: int | None = None, get_bytes: int | None = None) -> Any:
    """The DataFrame of these tasks' rows (timestamps in [lo_ms, hi_ms)), read by the JVM reader."""
    add_jar(spark)
    payload = plan_json(worker_store(store_url), tasks, lo_ms, hi_ms, get_bytes)
    return spark.read.format(SOURCE_CLASS).option("plan", payload).load()


@dataclasses.dataclass(frozen=True)
class TaskSizing:
    """What a read without `maxSplitBytes` sizes its tasks from, as Spark sizes its file sources' partitions:
    spark.sql.files.maxPartitionBytes, spark.sql.files.openCostInBytes and the default parallelism."""

    max_partition_bytes: int
    open_cost_bytes: int
    parallelism: int

    @classmethod
    def of_session(cls, spark: Any) -> TaskSizing:
        conf = spark._jsparkSession.sessionState().conf()
        return cls(int(conf.filesMaxPartitionBytes()), int(conf.filesOpenCostInBytes()),
                   int(spark.sparkContext.defaultParallelism))

    @classmethod
    def from_json(cls, text: str) -> TaskSizing:
        """The `columnarPlan` option the JVM half gives (jobs/spark_source/jvm, MqindexScanBuilder)."""
        try:
            got = json.loads(text)
            sizing = cls(got["maxPartitionBytes"], got["openCostInBytes"], got["parallelism"])
        except (ValueError, TypeError, KeyError) as exc:
            raise SourceOptionError(f"{PLAN_OPTION}: set by the JVM reader, not by hand; not its JSON ({exc}): "
                                    f"{text!r}") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in dataclasses.astuple(sizing)):
            raise SourceOptionError(f"{PLAN_OPTION}: set by the JVM reader, not by hand; expected positive whole "
                                    f"numbers, got {text!r}")
        return sizing

    def task_bytes(self, total_bytes: int) -> int:
        """min(maxPartitionBytes, max(openCostInBytes, bytes / parallelism)), 128 MiB at most by default. Every
        task costs the JVM the deserialization of the whole read's task list and a shuffle write of its partial
        aggregate: tasks of 32 MiB spent a third more CPU than tasks of 128 MiB on a 1 GB read
        (docs/BENCHMARKS.md). bytes / parallelism is rounded up (Spark rounds it down): rounded down, the bytes
        would not fit in `parallelism` tasks of that size, and plan.in_waves would make twice as many."""
        per_core = -(-total_bytes // max(1, self.parallelism))
        return int(max(1, min(self.max_partition_bytes, max(self.open_cost_bytes, per_core))))


def task_bytes(spark: Any, total_bytes: int) -> int:
    """The bytes of a task when `maxSplitBytes` is not given (TaskSizing.task_bytes, from this session)."""
    return TaskSizing.of_session(spark).task_bytes(total_bytes)


def plan_tasks(options: Mapping[str, str], opts: SourceOptions, sizing: TaskSizing, bounds: Bounds | None = None
               ) -> tuple[ScanPlan, Bounds]:
    """The read's plan for the JVM reader and the time bounds its rows are filtered by. Without `maxSplitBytes`
    in `options`, tasks are sized by `sizing` and made whole waves of its parallelism (plan.in_waves): the
    planned splits are cut where a task's share ends."""
    bounds = (bounds or Bounds()).tighten(from_ms=opts.from_ms, to_ms=opts.to_ms)
    plan = plan_scan(opts, bounds)
    if _get(options, "maxSplitBytes") is None and plan.splits:
        size = sizing.task_bytes(sum(s.est_bytes for s in plan.splits))
        plan.tasks = in_waves(plan.splits, size, sizing.parallelism)
    return plan, bounds


def read(spark: Any, **options: str) -> Any:
    """A batch read of topics with the options of `spark.read.format("mqindex")` (docs/SPARK.md), planned now
    from the metadata (a bad option raises SourceOptionError here), read by the JVM columnar reader. Without
    `maxSplitBytes`, tasks are sized as Spark sizes a file source's (`task_bytes`)."""
    opts = parse_options(options)
    for name, given in (("index", opts.index_url), ("indexKeys", opts.index_keys),
                        ("kafka.bootstrap.servers", opts.kafka)):
        if given is not None:
            raise SourceOptionError(f"{name}: not taken by the columnar read; use spark.read.format('mqindex')")
    plan, bounds = plan_tasks(options, opts, TaskSizing.of_session(spark))
    return read_tasks(spark, opts.store_url, plan.tasks, bounds.from_ms, bounds.to_ms)


@dataclasses.dataclass(frozen=True)
class StoreReads:
    """What the JVM reader's tasks asked of the store in a query: its ranged GETs (every attempt) and the bytes
    they returned (the scan's `storeGets` / `storeBytes` metrics, jvm/.../StoreMetrics.java)."""

    gets: int
    bytes: int


def store_reads(df: Any) -> StoreReads:
    """The store reads of `df`'s JVM scans in its last execution (after `df.collect()` and the like), summed over
    the scans of its executed plan; zero for a query read by the Python source, whose tasks report no metrics.
    Walks the plan through adaptive execution's stages."""
    totals = {"storeGets": 0, "storeBytes": 0}
    todo = [df._jdf.queryExecution().executedPlan()]
    while todo:
        node = todo.pop()
        name = node.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            todo.append(node.executedPlan())
            continue
        if name.endswith("QueryStageExec"):
            todo.append(node.plan())
            continue
        metrics = node.metrics()
        for key in totals:
            found = metrics.get(key)
            if found.isDefined():
                totals[key] += int(found.get().value())
        children = node.children()
        todo.extend(children.apply(i) for i in range(children.size()))
    return StoreReads(totals["storeGets"], totals["storeBytes"])
