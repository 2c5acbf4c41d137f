"""/metrics of broker compaction: cycles, objects in/out, bytes read/written/copied, seconds, and the
current count of stream set objects and stream objects."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


class CompactionCollector(Collector):
    def __init__(self, compactor: Any) -> None:  # broker.compaction.Compactor
        self.compactor = compactor

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        t = self.compactor.totals.snapshot()
        for name, key, doc in (("runs", "runs", "Compaction cycles"),
                               ("failed_runs", "failed_runs", "Compaction cycles with an error"),
                               ("objects_in", "objects_in", "Objects compacted (marked destroyed)"),
                               ("objects_out", "objects_out", "Objects written by compaction"),
                               ("bytes_read", "bytes_read", "Bytes compaction read"),
                               ("bytes_written", "bytes_written", "Bytes compaction uploaded"),
                               ("bytes_copied", "bytes_copied", "Bytes compaction moved by server-side copy"),
                               ("seconds", "seconds", "Seconds spent compacting")):
            yield CounterMetricFamily(f"mqindex_compaction_{name}", doc, value=t[key])
        counts = self.compactor.object_counts()
        objs = GaugeMetricFamily("mqindex_broker_objects", "Committed broker objects by kind", labels=["kind"])
        objs.add_metric(["stream_set_object"], counts["stream_set_objects"])
        objs.add_metric(["stream_object"], counts["stream_objects"])
        yield objs
