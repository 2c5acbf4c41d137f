"""kafka-python 3.x against `mqindex serve`: admin, produce with keys/headers/timestamps, consume, by key over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from tests.kafka.conftest import KafkaServerProcess


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, **opts: object) -> list:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000, **opts)
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        out = []
        for m in c:
            out.append(m)
            if len(out) >= expected:
                break
        return out
    finally:
        c.close()


def test_round_trip_keys_headers_timestamps(kafka_server: KafkaServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_server.bootstrap)
    try:
        admin.create_topics([NewTopic("orders", 3, 1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("orders", 3, 1)])
        assert "orders" in admin.list_topics()
    finally:
        admin.close()
    p = KafkaProducer(bootstrap_servers=kafka_server.bootstrap, acks="all")
    sent = []
    for i in range(30):
        md = p.send("orders", key=f"k{i}".encode(), value=f"v{i}".encode(),
                    headers=[("KEYS", f"a{i} b{i}".encode()), ("h", b"x")], timestamp_ms=1_700_000_000_000 + i
                    ).get(timeout=30)
        sent.append((md.partition, md.offset))
    p.close()
    assert len(set(sent)) == 30
    got = consume_all(kafka_server.bootstrap, "orders", 3, 30)
    assert sorted((m.key, m.value, m.timestamp) for m in got) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), 1_700_000_000_000 + i) for i in range(30))
    assert all(("h", b"x") in m.headers for m in got)
    # every key a Kafka client sent is indexed: record key and the KEYS header, found over HTTP
    for key in ("k7", "b12"):
        r = httpx.get(kafka_server.url + "/v1/messages", params={"topic": "orders", "key": key}, timeout=30)
        assert r.status_code == 200, r.text
        values = [m["value"] for m in r.json()["messages"]]
        assert len(values) == 1, r.json()
    # and through the CLI, as an operator would look one up
    mqindex = str(Path(sys.executable).parent / "mqindex")
    for key, value in (("k7", "v7"), ("a12", "v12")):
        out = subprocess.run([mqindex, "query", "--url", kafka_server.url, "--json", "orders", key],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        found = json.loads(out.stdout)
        assert [m["value"] for m in found] == [value], found
