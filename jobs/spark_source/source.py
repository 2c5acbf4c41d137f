"""The `mqindex` Python data source: `spark.read.format("mqindex")` and `spark.readStream.format("mqindex")`.

Schema as Spark's Kafka source (headers always included). Planning (`MqindexReader.partitions`) runs on
the driver side and reads only the controller metadata (plan.py), for key predicates with the `index` option
the cluster's key index, and with `kafka.bootstrap.servers` the partitions' high watermarks (tail.py); each
Spark task reads its object ranges with ranged GETs (read.py), or a partition's tail past the committed end
through Kafka (tail.py). Filters taken by the source are listed by `MqindexReader.pushed` (pushdown.py) and in the
Spark UI / logs; `explain()` shows the data source's scan with the filters Spark still evaluates.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from jobs.spark_source import PYTHON_NAME
from jobs.spark_source.columnar import PLAN_OPTION, TaskSizing, plan_json
from jobs.spark_source.columnar import plan_tasks as columnar_plan
from jobs.spark_source.index_lookup import key_hits, usable
from jobs.spark_source.options import SourceOptionError, SourceOptions, _get, parse_options
from jobs.spark_source.plan import Split, plan_scan
from jobs.spark_source.pushdown import Pushed, push
from jobs.spark_source.read import (
    arrow_batches,
    read_splits,
    rows_to_batches,
    settle_worker_heap,
    spark_rows,
    worker_store,
)
from jobs.spark_source.schema import SCHEMA
from jobs.spark_source.tail import Tail, tail_rows

log = logging.getLogger("mqindex.jobs.spark_source")

__all__ = ["SCHEMA", "MqindexPythonHalf", "MqindexReader", "MqindexSource", "SplitTask", "plan_tasks", "read_task"]

class SplitTask(InputPartition):
    """One Spark task: object ranges to read, or a partition's tail past the committed end (read through Kafka),
    and (for a key lookup) the offsets the index found."""

    def __init__(self, splits: Sequence[Split], offsets: dict[tuple[str, int], frozenset[int]] | None = None,
                 tails: Sequence[Tail] = ()) -> None:
        super().__init__(None)
        self.splits = tuple(splits)
        self.offsets = offsets
        self.tails = tuple(tails)

    def __repr__(self) -> str:
        return f"SplitTask({len(self.splits)} object ranges, {len(self.tails)} tails)"


def read_task(opts: SourceOptions, task: SplitTask, pushed: Pushed, arrow: bool = False) -> Iterator[Any]:
    """The task's rows (tuples), or with `arrow` the same rows as pyarrow record batches (what Spark is given)."""
    offsets = None if task.offsets is None else {k: set(v) for k, v in task.offsets.items()}
    b = pushed.bounds.tighten(from_ms=opts.from_ms, to_ms=opts.to_ms)
    keys = set(pushed.keys) if pushed.keys is not None else None
    if task.splits:
        read = arrow_batches if arrow else read_splits
        yield from read(worker_store(opts.store_url), task.splits, b.from_ms, b.to_ms, offsets, keys,
                        pushed.not_null)
    kafka = opts.kafka_conf
    for t in task.tails:
        if kafka is None:
            raise SourceOptionError("kafka.bootstrap.servers: a tail task of a read planned with it, read without")
        wanted = None if offsets is None else offsets.get((t.topic, t.partition), set())
        rows = tail_rows(kafka, t, b.from_ms, b.to_ms, wanted, keys, pushed.not_null)
        yield from rows_to_batches(rows) if arrow else spark_rows(rows)


def plan_tasks(opts: SourceOptions, pushed: Pushed, starting: Any = None, ending: Any = None) -> list[SplitTask]:
    """The Spark tasks of a read: one per packed group of object ranges, and one per partition tail read through
    Kafka; with key predicates answered by the index, one per object range or tail holding a hit (and no task
    where no hit is)."""
    plan = plan_scan(opts, pushed.bounds, starting, ending)
    # (keys, checked): the Kafka keys of a pushed key predicate as the index's candidates (the read keeps only
    # records of those keys), the indexKeys as hits the node checked against their records (index_lookup.py)
    lookups = [(sorted(keys), checked) for keys, checked in (
        (pushed.keys if opts.index_url and pushed.keys is not None and usable(pushed.keys) else None, False),
        (opts.index_keys, True)) if keys is not None]
    if lookups:
        assert opts.index_url is not None
        hits: dict[tuple[str, int], set[int]] | None = None
        for keys, checked in lookups:  # records indexed under a key asked, and under an index key asked when both are
            got = {(topic, p): offs for topic in {r.topic for r in plan.ranges}
                   for p, offs in key_hits(opts.index_url, topic, keys, checked=checked).items()}
            hits = got if hits is None else {tp: hits[tp] & got[tp] for tp in hits.keys() & got.keys()}
        assert hits is not None
        tasks = []
        for part in [*plan.splits, *plan.tails]:  # an object range or a tail: a task each that holds a hit
            found = frozenset(o for o in hits.get((part.topic, part.partition), ()) if part.start <= o < part.end)
            if found:
                tail = isinstance(part, Tail)
                tasks.append(SplitTask([] if tail else [part], {(part.topic, part.partition): found},
                                       [part] if tail else []))
        log.info("mqindex read %s: %d hits of %s in %d object ranges and tails (pushed %s)",
                 opts.topics or opts.pattern, sum(len(o) for t in tasks for o in (t.offsets or {}).values()),
                 " and ".join(f"{len(k)} keys" for k, _ in lookups), len(tasks), pushed.describe())
        return tasks
    log.info("mqindex read %s: %s (pushed %s)", opts.topics or opts.pattern, plan.describe(), pushed.describe())
    return [SplitTask(t) for t in plan.tasks] + [SplitTask([], None, [t]) for t in plan.tails]


class MqindexReader(DataSourceReader):
    def __init__(self, opts: SourceOptions, raw: dict[str, str] | None = None) -> None:
        self.opts = opts
        self.raw = raw or {}
        self.pushed = Pushed()
        given = _get(self.raw, PLAN_OPTION)
        python_read = (_get(self.raw, "reader") or "").strip().lower() == "python" or opts.index_url is not None \
            or opts.index_keys is not None or opts.kafka is not None  # the JVM half leaves (MqindexTable.readerOf)
        if given is not None and python_read:
            raise SourceOptionError(f"{PLAN_OPTION}: set by the JVM reader, not by hand; leave it out")
        self.sizing = None if given is None else TaskSizing.from_json(given)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 - Spark's name
        yield from push(self.pushed, filters)

    def partitions(self) -> Sequence[InputPartition]:
        if self.sizing is not None:  # the JVM reader reads (jobs/spark_source/jvm, MqindexScan): its plan, as JSON
            plan, bounds = columnar_plan(self.raw, self.opts, self.sizing, self.pushed.bounds)
            log.info("mqindex read %s by the JVM reader: %s (pushed %s)", self.opts.topics or self.opts.pattern,
                     plan.describe(), self.pushed.describe())
            return [InputPartition(plan_json(worker_store(self.opts.store_url), plan.tasks, bounds.from_ms,
                                             bounds.to_ms))]
        return plan_tasks(self.opts, self.pushed)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, SplitTask):
            return  # no task planned (a key no record has): Spark reads one empty InputPartition instead
        yield from read_task(self.opts, partition, self.pushed, arrow=True)
        settle_worker_heap()  # the worker's gc.collect() after the task then walks only what the task left


class MqindexSource(DataSource):
    """`spark.read.format("mqindex")`: topics read straight from mqindex's object store; `df.write.format("mqindex")`:
    rows produced through the cluster (jobs/spark_write.py). See docs/SPARK.md."""

    @classmethod
    def name(cls) -> str:
        return "mqindex"

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.raw = dict(options)
        self._opts: SourceOptions | None = None

    @property
    def opts(self) -> SourceOptions:
        """The read options, checked when a read is planned (a write takes other options)."""
        if self._opts is None:
            self._opts = parse_options(self.raw)
        return self._opts

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from jobs.spark_write import writer

        return writer(self.raw, schema, overwrite)

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MqindexReader(self.opts, self.raw)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        from jobs.spark_source.stream import MqindexStreamReader

        return MqindexStreamReader(parse_options(self.raw, stream=True))


class MqindexPythonHalf(MqindexSource):
    """The Python data source under the name the JVM half reaches it by (jobs/spark_source/__init__.py)."""

    @classmethod
    def name(cls) -> str:
        return PYTHON_NAME
