"""`spark.readStream.format("mqindex")`: micro-batches of committed offsets per partition.

Offsets are JSON `{"topic": {"partition": next offset}}` (partition numbers as strings), checkpointed by
Spark: a restarted query resumes from the end offsets of its last committed micro-batch, and a
micro-batch always reads exactly [its start, its end) of each partition, so nothing is skipped or
repeated. `latestOffset` is each partition's committed end (what the broker has uploaded: records still
only in a node's WAL or log cache come in a later micro-batch). A partition that appears (more
partitions, a new topic matching `subscribePattern`) is read from its earliest retained offset. An offset
trimmed by retention before it was read fails the query with failOnDataLoss=true (the default), else
the read continues from the retained start.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from jobs.spark_source.options import EARLIEST, LATEST, SourceOptions
from jobs.spark_source.plan import Bounds, open_metadata, partition_ranges, resolve_topics
from jobs.spark_source.pushdown import Pushed

Offsets = dict[str, dict[str, int]]


def _ints(off: Offsets) -> dict[str, dict[int, int]]:
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in off.items()}


class MqindexStreamReader(DataSourceStreamReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def _offsets(self, starting: Any, ending: Any, use_end: bool) -> Offsets:
        meta = open_metadata(self.opts)
        try:
            meta.catch_up()
            topics = resolve_topics(meta, self.opts)
            ranges = partition_ranges(meta, topics, self.opts, Bounds(), starting, ending)
        finally:
            meta.close()
        out: Offsets = {}
        for r in ranges:
            out.setdefault(r.topic, {})[str(r.partition)] = r.end if use_end else r.start
        return out

    def initialOffset(self) -> Offsets:  # noqa: N802 - Spark's name
        """Where a new query starts: startingOffsets (default latest, as Spark's Kafka source streams)."""
        spec = self.opts.starting
        start: dict[str, dict[int, int]] | None = None
        if isinstance(spec, int):
            meta = open_metadata(self.opts)
            try:
                meta.catch_up()
                topics = resolve_topics(meta, self.opts)
            finally:
                meta.close()
            start = {t.name: {p: spec for p in range(t.partitions)} for t in topics}
        else:
            start = spec
        return self._offsets(start, {t: {p: LATEST for p in ps} for t, ps in start.items()}, use_end=False)

    def latestOffset(self, start: Offsets | None = None, limit: Any = None) -> Offsets:  # noqa: N802
        """Each partition's committed end."""
        return self._offsets({}, {}, use_end=True)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        from jobs.spark_source.source import plan_tasks

        lo = _ints(start)
        hi = _ints(end)
        for t, parts in hi.items():  # a partition new since `start` is read from its earliest retained offset
            for p in parts:
                lo.setdefault(t, {}).setdefault(p, EARLIEST)
        return plan_tasks(self.opts, Pushed(), lo, hi)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        from jobs.spark_source.read import settle_worker_heap
        from jobs.spark_source.source import SplitTask, read_task

        if not isinstance(partition, SplitTask):
            return
        yield from read_task(self.opts, partition, Pushed(), arrow=True)
        settle_worker_heap()

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the source holds no per-batch state."""
