"""`spark.readStream.format("mqindex")`: micro-batches of committed offsets per partition.

Offsets are JSON `{"topic": {"partition": next offset}}` (partition numbers as strings), checkpointed by
Spark: a restarted query resumes from the end offsets of its last committed micro-batch, and a
micro-batch always reads exactly [its start, its end) of each partition, so nothing is skipped or
repeated. `latestOffset` is each partition's committed end (what the broker has uploaded: records still
only in a node's WAL or log cache come in a later micro-batch). A partition that appears (more
partitions, a new topic matching `subscribePattern`) is read from its earliest retained offset. An offset
trimmed by retention before it was read fails the query with failOnDataLoss=true (the default), else
the read continues from the retained start. So does a topic deleted while the query reads it: it fails
the query naming the topic, else the query goes on without it, as Spark's Kafka source does; and a
partition whose offsets went back (its topic deleted and made again): it fails the query, else is read
from its earliest offset. A topic made again that has grown past the offset read to before the next
micro-batch is not seen (as by Spark's Kafka source).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from broker.metadata import MetadataClient
from broker.partitions.topics import TopicInfo, TopicRegistry
from jobs.spark_source.options import EARLIEST, LATEST, SourceOptionError, SourceOptions
from jobs.spark_source.plan import Bounds, DataLoss, open_metadata, partition_ranges, resolve_topics
from jobs.spark_source.pushdown import Pushed

Offsets = dict[str, dict[str, int]]
log = logging.getLogger("mqindex.jobs.spark_source")


def _ints(off: Offsets) -> dict[str, dict[int, int]]:
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in off.items()}


class MqindexStreamReader(DataSourceStreamReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def _offsets(self, starting: Any, ending: Any, use_end: bool, seen: Offsets | None = None) -> Offsets:
        """Each partition's start (or, `use_end`, end) of [starting, ending); with `seen` (offsets the query has
        read to), topics deleted since are handled first (_live), in the same view of the metadata."""
        meta = open_metadata(self.opts)
        try:
            meta.catch_up()
            topics = self._live(meta, seen) if seen is not None else resolve_topics(meta, self.opts)
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
        return self._offsets({}, {}, use_end=True, seen=start or {})

    def _live(self, meta: MetadataClient, seen: Offsets) -> list[TopicInfo]:
        """The topics read now. One gone from the metadata since the query started (named in `seen`, the offsets
        read to, or in the options: a new query with an unknown topic fails in initialOffset): DataLoss naming it
        with failOnDataLoss=true, else left out of the query from now on, restarts included."""
        topics: list[TopicInfo] | None = None
        if self.opts.pattern is not None:  # a deleted topic no longer matches: the topics read now are these
            topics = resolve_topics(meta, self.opts)
            gone = sorted(set(seen) - {t.name for t in topics})
        else:
            reg = TopicRegistry(meta)
            gone = sorted(t for t in set(seen) | set(self.opts.topics) if reg.get(t) is None)
        if gone:
            read_to = {t: seen[t] for t in gone if t in seen}
            if self.opts.fail_on_data_loss:
                raise DataLoss(f"topic {', '.join(map(repr, gone))} was deleted while the query read it (read up "
                               f"to {read_to or 'nothing'}): its records after that are lost to the query; set "
                               "failOnDataLoss=false to go on without it")
            log.warning("mqindex stream: topic %s deleted (read up to %s); going on without it "
                        "(failOnDataLoss=false)", ", ".join(gone), read_to or "nothing")
            if topics is None:
                self.opts = dataclasses.replace(self.opts, topics=tuple(t for t in self.opts.topics if t not in gone))
        return topics if topics is not None else resolve_topics(meta, self.opts)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        """The tasks of [start, end). A partition whose end is below its start (its topic deleted and made again,
        as Spark's Kafka source sees it: "offset was changed"): DataLoss with failOnDataLoss=true, else read from
        its earliest retained offset."""
        from jobs.spark_source.source import plan_tasks

        lo = _ints(start)
        hi = _ints(end)
        for t, parts in hi.items():  # a partition new since `start` is read from its earliest retained offset
            for p, e in parts.items():
                b = lo.setdefault(t, {}).setdefault(p, EARLIEST)
                if b > e >= 0:
                    if self.opts.fail_on_data_loss:
                        raise DataLoss(f"{t}/{p}: the offset went back from {b} to {e} (the topic deleted and made "
                                       "again?): records may have been missed; set failOnDataLoss=false to read it "
                                       "from its earliest offset")
                    log.warning("mqindex stream: %s/%d went back from offset %d to %d; reading it from its earliest "
                                "offset (failOnDataLoss=false)", t, p, b, e)
                    lo[t][p] = EARLIEST
        try:
            return plan_tasks(self.opts, Pushed(), lo, hi)
        except SourceOptionError:  # a topic of the options deleted since latestOffset looked
            meta = open_metadata(self.opts)
            try:
                meta.catch_up()
                self._live(meta, start)  # DataLoss, or left out
            finally:
                meta.close()
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
