"""`spark.readStream.format("mqindex")`: micro-batches of committed offsets per partition.

Offsets are JSON `{"topic": {"partition": next offset}}` (partition numbers as strings), checkpointed by
Spark: a restarted query resumes from the end offsets of its last committed micro-batch, and a
micro-batch always reads exactly [its start, its end) of each partition, so nothing is skipped or
repeated. `latestOffset` is each partition's committed end (what the broker has uploaded: records still
only in a node's WAL or log cache come in a later micro-batch). A partition that appears (more
partitions, a new topic matching `subscribePattern`) is read from its earliest retained offset. An offset
trimmed by retention before it was read fails the query with failOnDataLoss=true (the default), else
the read continues from the retained start. So does a topic deleted while the query reads it: it fails
the query naming the topic, else the query goes on without it, as Spark's Kafka source does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from jobs.spark_source.options import EARLIEST, LATEST, SourceOptions
from jobs.spark_source.plan import Bounds, DataLoss, open_metadata, partition_ranges, resolve_topics
from jobs.spark_source.pushdown import Pushed

Offsets = dict[str, dict[str, int]]
log = logging.getLogger("mqindex.jobs.spark_source")


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
        self._leave_deleted(start or {})
        return self._offsets({}, {}, use_end=True)

    def _leave_deleted(self, *offsets: Offsets) -> None:
        """Topics of `offsets` deleted since: DataLoss naming them with failOnDataLoss=true, else they are left out
        of the read from now on."""
        from broker.partitions.topics import TopicRegistry

        named = {t for off in offsets for t in off}
        if not named:
            return
        meta = open_metadata(self.opts)
        try:
            meta.catch_up()
            reg = TopicRegistry(meta)
            gone = sorted(t for t in named if reg.get(t) is None)
        finally:
            meta.close()
        if not gone:
            return
        read_to = {t: off[t] for off in offsets for t in gone if t in off}
        if self.opts.fail_on_data_loss:
            raise DataLoss(f"topic {', '.join(map(repr, gone))} was deleted while the query read it (read up to "
                           f"{read_to}): its records after that are lost to the query; set failOnDataLoss=false "
                           "to go on without it")
        log.warning("mqindex stream: topic %s deleted (read up to %s); going on without it (failOnDataLoss=false)",
                    ", ".join(gone), read_to)
        if self.opts.pattern is None:
            self.opts = dataclasses.replace(self.opts, topics=tuple(t for t in self.opts.topics if t not in gone))

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        from jobs.spark_source.source import plan_tasks

        self._leave_deleted(start, end)
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
