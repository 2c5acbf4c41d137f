"""The store time of an index entry is decided once, when the broker appends the record, and stored with it:
a Kafka client's records with a skewed CreateTime (an hour in the past) are found by a begin/end lookup over
their append time live, after a kill -9 and a restart that re-dispatches them from the local WAL, and a Spark
build's extract reads the same time from the objects the node wrote."""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka import KafkaProducer

from broker.metadata import MetadataClient
from broker.objects.format import (
    RECORD_HEADER_SIZE,
    TIMED_RECORD_MAGIC,
    UNTIMED_RECORD_HEADER_SIZE,
    StreamRecord,
    decode_block,
    encode_block_header,
    encode_record,
)
from broker.partitions.batch_columns import object_columns
from broker.partitions.object_listing import list_partition_objects
from broker.partitions.record_entries import object_entries
from broker.partitions.topics import TopicRegistry
from storage_tier import open_store
from tests.cluster.harness import key_pages
from tests.kafka.conftest import KafkaServerProcess

HOUR_MS = 3_600_000
TOPIC = "skewed"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pages(base: str, key: str, begin: int, end: int, size: int) -> list[list[tuple[int, int, int]]]:
    return key_pages(base, key, begin, end, size, all_readable=False, topic=TOPIC)


def hits(base: str, key: str, begin: int = 0, end: int | None = None) -> list[list[int]]:
    """The node's own index answer (local entries): [partition, offset, size, store time] each."""
    params: dict[str, Any] = {"topic": TOPIC, "key": key, "begin": begin, "max": 1000}
    if end is not None:
        params["end"] = end
    r = httpx.get(f"{base}/v1/internal/index/query", params=params, timeout=60)
    assert r.status_code == 200, r.text
    return list(r.json()["hits"])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path / "node", "--store", f"file://{tmp_path}/store",
                           "--metadata", f"sqlite:///{tmp_path}/meta.sqlite", "--upload-interval-s", "3600")
    s.start()
    try:
        yield s
    finally:
        s.stop(signal.SIGKILL)


def test_a_kafka_clients_skewed_records_keep_their_append_time_across_a_kill_and_in_the_objects(
        server: KafkaServerProcess, tmp_path: Path) -> None:
    r = httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60)
    assert r.status_code == 201, r.text
    begin = now_ms()
    skew = begin - HOUR_MS  # the client's clock is an hour behind
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=5)
    try:
        for i in range(23):
            producer.send(TOPIC, key=b"late", value=f"v{i}".encode(), timestamp_ms=skew + i,
                          headers=[("KEYS", f"late-{i % 3}".encode())])
        producer.flush(30)
    finally:
        producer.close()
    end = now_ms()

    live = pages(server.url, "late", begin, end, 5)
    assert sum(map(len, live)) == 23 and len(live) == 5
    assert {t for page in live for *_, t in page} == {skew + i for i in range(23)}  # the records keep CreateTime
    assert pages(server.url, "late", skew - 1000, skew + 1000, 5) == [[]]  # the index is not by CreateTime
    live_hits = hits(server.url, "late")
    assert len(live_hits) == 23 and all(begin <= h[3] <= end for h in live_hits)
    live_by_key = {k: pages(server.url, k, begin, end, 2) for k in ("late-0", "late-1", "late-2")}

    # kill -9, the local index lost with it: the restart replays the WAL and re-dispatches every record
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    shutil.rmtree(server.data_dir / "index")
    server.extra[-1] = "0.5"  # uploads from now on: the objects below
    server.start()
    deadline = time.monotonic() + 60
    while len(hits(server.url, "late")) < 23:
        assert time.monotonic() < deadline, "the records were not re-dispatched"
        time.sleep(0.2)
    assert "re-dispatched to the index" in server.log.read_text()
    assert sorted(hits(server.url, "late")) == sorted(live_hits)  # the same store times, exactly
    assert pages(server.url, "late", begin, end, 5) == live
    assert {k: pages(server.url, k, begin, end, 2) for k in live_by_key} == live_by_key

    # the Spark build's extract, on the objects the node uploaded: the same entries at the same times
    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", node_id=-1)
    store = open_store(f"file://{tmp_path}/store")
    try:
        info = TopicRegistry(meta).get(TOPIC)
        assert info is not None
        want = {(h[0], h[1]): h[3] for h in live_hits}
        deadline = time.monotonic() + 60
        while True:
            listings = {p: list_partition_objects(meta, info, p) for p in range(2)}
            if all(sum(x.end - x.start for x in listings[p].parts) == listings[p].end_offset for p in range(2)):
                break
            assert time.monotonic() < deadline, "the records were not uploaded"
            time.sleep(0.2)
        built: dict[tuple[int, int], int] = {}
        columns: dict[tuple[int, int], int] = {}
        for p, listing in listings.items():
            for part in listing.parts:
                for e in object_entries(store, part.key, part.size, part.stream_id, part.start, part.end):
                    built[(p, e.offset)] = e.store_time_ms
                cols = object_columns(store, part.key, part.size, part.stream_id, part.start, part.end)
                columns.update({(p, int(o)): int(t) for o, t in zip(cols.offset, cols.time, strict=True)})
        assert built == want
        assert columns == want
        # a build window over the append times holds them all; one over the CreateTimes none
        p0 = listings[0].parts[0] if listings[0].parts else listings[1].parts[0]
        assert list(object_entries(store, p0.key, p0.size, p0.stream_id, p0.start, p0.end, lo=skew - 1000,
                                   hi=skew + 1000)) == []
    finally:
        meta.close()


def test_records_without_an_append_time_are_still_read_and_keep_the_old_rule(tmp_path: Path) -> None:
    """A data block holding a stream record written before the append time was stored (magic 0x22) and one
    written since (0x23) decodes both; the old one has no append time (its records fall back to their own
    timestamps: broker/partitions/index_time.py)."""
    from broker.partitions.client_messages import InMessage
    from broker.partitions.index_time import entry_time
    from broker.partitions.records import encode_batch

    old = StreamRecord(5, 0, 0, 1, encode_batch([InMessage(b"v", key=b"k", timestamp=1000)], 1000, "timestamp"))
    new = StreamRecord(5, 0, 1, 1, encode_batch([InMessage(b"v", key=b"k", timestamp=1000)], 1000, "timestamp"),
                       append_ms=7777)
    assert encode_record(old)[0] == 0x22 and len(encode_record(old)) == UNTIMED_RECORD_HEADER_SIZE + len(old.payload)
    assert encode_record(new)[0] == TIMED_RECORD_MAGIC and len(encode_record(new)) == RECORD_HEADER_SIZE + len(
        new.payload)
    data = encode_record(old) + encode_record(new)
    block = encode_block_header(2, len(data)) + data
    got = decode_block("k", block)
    assert [r.append_ms for r in got] == [None, 7777]
    assert json.dumps([r.payload.hex() for r in got]) == json.dumps([old.payload.hex(), new.payload.hex()])
    assert entry_time(7777, 1000, lambda: 500) == 7777
    assert entry_time(None, 1000, lambda: 500) == 500 and entry_time(None, 1000, lambda: 5000) == 1000
