"""What key lookups cost: files read and object store GETs per lookup, and what the key filters saved.

`LookupStats` is one per service, updated by every lookup (index_service/query.py) and read by /metrics
(`LookupCollector`, registered by the HTTP server):

- mqindex_index_filter_checks_total{verdict="maybe"|"no"}: a file's filter said the key may be in it (the file
  is read) or is not (the file is skipped, never read);
- mqindex_index_filter_false_positives_total: the filter said maybe and the file held no entry of the key
  (counted when the lookup's time range covered the whole file, so an empty answer means no entry at all);
- mqindex_index_filter_unusable_total: a filter missing or damaged (the file is read instead);
- mqindex_index_lookup_files (histogram): files read per lookup;
- mqindex_index_lookup_gets (histogram): object store GETs per lookup (ranged reads of uploaded files and
  filters fetched from the store), counted on the lookup's own thread by `count_get`.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

BUCKETS = (0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)

_local = threading.local()


def count_get(n: int = 1) -> None:
    """Record n object store GETs made on this thread for the lookup it runs (none running: ignored)."""
    if getattr(_local, "gets", None) is not None:
        _local.gets += n


def start_counting() -> None:
    _local.gets = 0


def stop_counting() -> int:
    n = int(getattr(_local, "gets", 0) or 0)
    _local.gets = None
    return n


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0
        self.n = 0

    def observe(self, v: int) -> None:
        self.counts[bisect_left(BUCKETS, v)] += 1
        self.sum += v
        self.n += 1

    def buckets(self) -> list[tuple[str, int]]:
        out, acc = [], 0
        for b, c in zip([*map(str, BUCKETS), "+Inf"], self.counts, strict=True):
            acc += c
            out.append((b, acc))
        return out


class LookupStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lookups = 0
        self.filter_maybe = 0
        self.filter_no = 0
        self.false_positives = 0
        self.filters_unusable = 0
        self.files = _Histogram()
        self.gets = _Histogram()

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def lookup(self, files_read: int, gets: int, maybe: int, no: int, false_positives: int) -> None:
        with self._lock:
            self.lookups += 1
            self.filter_maybe += maybe
            self.filter_no += no
            self.false_positives += false_positives
            self.files.observe(files_read)
            self.gets.observe(gets)

    def snapshot(self) -> dict[str, int | float]:
        with self._lock:
            return {"lookups": self.lookups, "filter_maybe": self.filter_maybe, "filter_no": self.filter_no,
                    "false_positives": self.false_positives, "filters_unusable": self.filters_unusable,
                    "files_read": self.files.sum, "gets": self.gets.sum}


class LookupCollector(Collector):
    def __init__(self, stats: LookupStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        s = self.stats
        with s._lock:
            checks = CounterMetricFamily("mqindex_index_filter_checks", "Key filter answers before reading an index "
                                         "file: maybe (the file is read) or no (it is skipped)", labels=["verdict"])
            checks.add_metric(["maybe"], s.filter_maybe)
            checks.add_metric(["no"], s.filter_no)
            yield checks
            yield CounterMetricFamily("mqindex_index_filter_false_positives", "Key filter said maybe and the file "
                                      "held no entry of the key", value=s.false_positives)
            yield CounterMetricFamily("mqindex_index_filter_unusable", "Index files read because their key filter "
                                      "was missing or damaged", value=s.filters_unusable)
            for name, h, doc in (("files", s.files, "Index files read per key lookup"),
                                 ("gets", s.gets, "Object store GETs per key lookup")):
                yield HistogramMetricFamily(f"mqindex_index_lookup_{name}", doc, buckets=h.buckets(),
                                            sum_value=h.sum)
