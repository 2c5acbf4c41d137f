"""The record times behind `mqindex_group_lag_seconds` (api/http/group_metrics.py): the store time of the record
at a group's committed offset, kept by (data stream, offset) once read (a record's time does not change).

They are read ahead, at commit time: when a commit puts rows at a (partition, offset) no row was at before, the
lag rows (`_Rows.apply`, on the metadata thread) queue the pair here (`ahead`: a list append) and a reader thread
of its own reads the queued pairs a partition at a time (`record_times`: one pass over nearby offsets), so that
the next scrape finds them. A scrape reads only what is still missing (an offset before the partition's start, a
record written since at an offset that was caught up, pairs the reader has not reached), within its budget.
The reader's CPU is counted (`read_ns`, exported as mqindex_group_lag_time_read_cpu_seconds_total).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

from broker.partitions.kafka_clients.group_admin import record_times
from broker.partitions.partition_map import PartitionMap

log = logging.getLogger(__name__)

KEEP = 100_000  # times kept beyond 4 a pair asked: past that the cache starts again (offsets moved on)


class RecordTimes:
    def __init__(self, partitions: Callable[[], PartitionMap]) -> None:
        self._partitions = partitions
        self.times: dict[tuple[int, int], float] = {}  # (data stream, offset) -> the record's time
        self.read_ns = 0  # the reader thread's CPU
        self._lock = threading.Lock()
        self._queued: list[tuple[str, int, int]] = []
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # -- at commit time ---------------------------------------------------------------------------
    def ahead(self, topic: str, partition: int, offset: int) -> None:
        """Read the time of the record at `offset` soon (called by an apply: only queues it)."""
        with self._lock:
            self._queued.append((topic, partition, offset))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="group-lag-times", daemon=True)
                self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                queued, self._queued = self._queued, []
            t0 = time.thread_time_ns()
            try:
                self._read_ahead(queued)
            except Exception:  # noqa: BLE001 - the scrapes read what is missing
                log.warning("consumer group lag: record times not read ahead", extra={"pairs": len(queued)},
                            exc_info=True)
            self.read_ns += time.thread_time_ns() - t0

    def _read_ahead(self, queued: list[tuple[str, int, int]]) -> None:
        parts = self._partitions()
        by_tp: dict[tuple[str, int], set[int]] = {}
        for topic, partition, offset in queued:
            by_tp.setdefault((topic, partition), set()).add(offset)
        for (topic, partition), offsets in by_tp.items():
            try:
                p = parts.get(topic, partition)
            except LookupError:
                continue
            s = parts.meta.get_stream(p.data_stream, refresh=False)
            end = p.acked_end if p.owned else s.end_offset
            need = sorted(o for o in offsets if s.start_offset <= o < end and (p.data_stream, o) not in self.times)
            for o, t in record_times(parts, topic, partition, need).items():
                self.times[(p.data_stream, o)] = float(t)

    # -- at a scrape ------------------------------------------------------------------------------
    def get(self, tps: list[tuple[str, int]], streams: list[int], pairs: list[tuple[int, int]],
            budget_s: float) -> list[float]:
        """The record time of each (partition index into `tps`, offset) of `pairs` (NaN: not read yet): kept, or
        read now a partition at a time within `budget_s` of reads; the partitions left wait for the next scrape.
        `streams`: the data stream of each partition of `tps`."""
        times = self.times
        got = [times.get((streams[w], a), np.nan) for w, a in pairs]
        missing: dict[int, list[int]] = {}
        for k, (w, _a) in enumerate(pairs):
            if got[k] != got[k]:  # NaN
                missing.setdefault(w, []).append(k)
        until = time.monotonic() + budget_s
        for w, ks in missing.items():
            if time.monotonic() >= until:
                break
            topic, partition = tps[w]
            read = record_times(self._partitions(), topic, partition, sorted({pairs[k][1] for k in ks}))
            for a, t in read.items():
                times[(streams[w], a)] = float(t)
            for k in ks:
                t = read.get(pairs[k][1])
                if t is not None:
                    got[k] = float(t)
        if len(times) > KEEP + 4 * len(pairs):
            times.clear()
        return got
