"""mqindex_kafka_request_seconds{api}: every Kafka request a real `mqindex serve` answers is counted under its API's
name with the time from reading it to writing its answer; a Fetch's includes its wait for records, and a
transactional producer's requests show under their own names."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import Producer

from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_transactions import make_topics
from tests.kafka.wire import Wire

TOPIC = "metered"
_LINE = re.compile(r'^mqindex_kafka_request_seconds_(bucket|count|sum)\{api="([^"]+)"(?:,le="([^"]+)")?\} (\S+)$')


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("metered") / "node").start()
    try:
        make_topics(s, {TOPIC: 1})
        yield s
    finally:
        s.stop()


def histogram(s: KafkaServerProcess) -> dict[str, dict[str, float]]:
    """API name -> {"count", "sum", "le=<bound>" ...} as /metrics shows them now."""
    out: dict[str, dict[str, float]] = {}
    for line in httpx.get(f"{s.url}/metrics", timeout=30).text.splitlines():
        m = _LINE.match(line)
        if m:
            kind, api, le, value = m.groups()
            out.setdefault(api, {})[f"le={le}" if kind == "bucket" else kind] = float(value)
    return out


def count(h: dict[str, dict[str, float]], api: str) -> float:
    return h.get(api, {}).get("count", 0.0)


def fetch(w: Wire, max_wait_ms: int, offset: int) -> None:
    w.call((1, 12), replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
           session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[dict(
               topic=TOPIC, partitions=[dict(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                             last_fetched_epoch=-1, log_start_offset=-1,
                                             partition_max_bytes=1 << 20)])])


def test_each_request_is_counted_once_under_its_api(server: KafkaServerProcess) -> None:
    before = histogram(server)
    with Wire(server.kafka_port) as w:
        for _ in range(3):
            w.call((3, 1), topics=[])
        for _ in range(2):
            w.call((18, 3), client_software_name="t", client_software_version="1")
    after = histogram(server)
    assert count(after, "Metadata") - count(before, "Metadata") == 3
    assert count(after, "ApiVersions") - count(before, "ApiVersions") == 2
    assert after["Metadata"]["sum"] >= before.get("Metadata", {}).get("sum", 0.0)


def test_a_long_polling_fetch_is_timed_with_its_wait(server: KafkaServerProcess) -> None:
    """A Fetch past the partition's end waits its max_wait_ms (0.3 s) for records: its time lands between the
    0.25 s and 0.5 s bounds, where no quick request goes."""
    before = histogram(server).get("Fetch", {})
    with Wire(server.kafka_port) as w:
        started = time.monotonic()
        fetch(w, 300, 0)
        waited = time.monotonic() - started
    after = histogram(server)["Fetch"]
    assert waited >= 0.29
    assert after["count"] - before.get("count", 0.0) == 1
    assert after["le=0.25"] == before.get("le=0.25", 0.0)  # not counted as quicker than it was
    assert after["le=0.5"] - before.get("le=0.5", 0.0) == 1
    assert after["sum"] - before.get("sum", 0.0) >= 0.29


def test_a_transaction_shows_its_requests_by_name(server: KafkaServerProcess) -> None:
    before = histogram(server)
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "metered-txn"})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(10):
            p.produce(TOPIC, b"v", key=str(i).encode())
        p.commit_transaction(30)
    finally:
        p.flush(10)
    after = histogram(server)
    for api in ("FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "Produce", "EndTxn"):
        assert count(after, api) > count(before, api), api
    assert count(after, "EndTxn") - count(before, "EndTxn") == 1
