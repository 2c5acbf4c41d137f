"""Prometheus metrics of one server process: request counters/histograms and the object store meter."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from storage_tier import BlobStore


class StoreCollector(Collector):
    """Exports a BlobStore's request meter as counters (requests by kind, bytes in/out)."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        snap = self.store.meter.snapshot()
        req = CounterMetricFamily("mqindex_object_store_requests", "Object store requests by kind",
                                  labels=["backend", "kind"])
        for kind, n in snap.requests.items():
            req.add_metric([self.store.name, kind], n)
        yield req
        b = CounterMetricFamily("mqindex_object_store_bytes", "Object store bytes moved",
                                labels=["backend", "direction"])
        b.add_metric([self.store.name, "in"], snap.bytes_in)
        b.add_metric([self.store.name, "out"], snap.bytes_out)
        yield b


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.http_requests = Counter("mqindex_http_requests", "HTTP requests", ["route", "status"],
                                     registry=self.registry)
        self.http_latency = Histogram("mqindex_http_latency_seconds", "HTTP request latency", ["route"],
                                      registry=self.registry)

    def watch_store(self, store: BlobStore) -> None:
        self.registry.register(StoreCollector(store))
