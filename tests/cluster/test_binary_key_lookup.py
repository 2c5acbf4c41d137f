"""Key lookups of keys that are not UTF-8 (a long serialised big-endian, a UUID's bytes, a schema registry's key), on
two real `mqindex serve` processes with Kafka listeners: a confluent-kafka producer writes records under binary
keys that differ only in bytes that are not UTF-8, on partitions led by each node; a lookup asked by the key's
bytes (`key_encoding=base64` over HTTP, `--base64` in the CLI) from either node returns exactly that key's records,
cluster-wide, never those of a key whose bytes decode to the same replaced text."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import Cluster, kafka_cluster, wait_until

TOPIC = "binary-keyed"
PARTITIONS = 2
MQINDEX = str(Path(sys.executable).parent / "mqindex")
# pairs that one decoding with U+FFFD replacements made one key: \xff and \xfe both become U+FFFD; and a text key
# spelled as the binary key b"\xff\x01" is indexed (U+FDD0 and its base64)
LOOKALIKE = "\ufdd0/wE="
KEYS = {b"\xff\x01": 3, b"\xfe\x01": 2, (-2).to_bytes(8, "big", signed=True): 2,
        (-3).to_bytes(8, "big", signed=True): 1, LOOKALIKE.encode(): 2}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedFS,
            pg_url: Callable[[], str]) -> Iterator[Cluster]:
    store = seaweedfs.store_url("mqindex", f"binkeys-{uuid.uuid4().hex[:8]}")
    with kafka_cluster(tmp_path_factory.mktemp("binary-keys"), store, pg_url(), 2) as c:
        yield c


def lookup(c: Cluster, via: int, key: str, encoding: str | None = None) -> list[dict[str, Any]]:
    params = {"topic": TOPIC, "key": key, "max": 100}
    if encoding:
        params["key_encoding"] = encoding
    r = httpx.get(f"{c.url(via)}/v1/messages", params=params, timeout=60)
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


def test_binary_keys_are_found_by_their_bytes_from_every_node(cluster: Cluster) -> None:
    c = cluster
    r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=60)
    assert r.status_code == 201, r.text
    wait_until(lambda: sum(len(v) for v in c.leaders().values()) == PARTITIONS, 30, "every partition led")
    leaders = {int(p.rsplit("-", 1)[1]): n for n, ps in c.leaders().items() for p in ps if p.startswith(TOPIC)}
    assert sorted(leaders.values()) == [0, 1], f"a partition on each node: {leaders}"
    ports = ",".join(f"127.0.0.1:{c.nodes[n].kafka_port}" for n in range(2))  # type: ignore[attr-defined]
    producer = Producer({"bootstrap.servers": ports, "acks": "all", "enable.idempotence": True})
    try:
        for i, (key, count) in enumerate(KEYS.items()):
            for j in range(count):  # each key on both partitions where it has more than one record
                producer.produce(TOPIC, value=f"{i}-{j}".encode(), key=key, partition=(i + j) % PARTITIONS)
        assert producer.flush(60) == 0
    finally:
        producer.close()

    for i, (key, count) in enumerate(KEYS.items()):
        asked = base64.b64encode(key).decode()
        for via in range(2):
            found = lookup(c, via, asked, "base64")
            assert sorted(m["value"] for m in found) == [f"{i}-{j}" for j in range(count)], (key, via, found)
            assert {m["key"].encode() if m["key_encoding"] == "utf-8" else base64.b64decode(m["key"])
                    for m in found} == {key}
            assert {m["partition"] for m in found} == {j % PARTITIONS for j in range(i, i + count)}
    # the text key that looks like a binary key's indexed text is found by its text, alone
    assert sorted(m["value"] for m in lookup(c, 1, LOOKALIKE)) == ["4-0", "4-1"]
    # the text the bytes decode to with replacement characters is not any of these keys
    assert lookup(c, 0, b"\xff\x01".decode(errors="replace")) == []

    got = subprocess.run([MQINDEX, "query", TOPIC, base64.b64encode(b"\xfe\x01").decode(), "--base64", "--json",
                          "--url", c.url(1)], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert sorted(m["value"] for m in json.loads(got.stdout)) == ["1-0", "1-1"], got.stdout


def test_a_bad_base64_key_is_a_400_naming_the_key(cluster: Cluster) -> None:
    for bad in ("not base64!", "/wE", "===="):
        r = httpx.get(f"{cluster.url(0)}/v1/messages", params={"topic": TOPIC, "key": bad, "key_encoding": "base64"},
                      timeout=30)
        assert r.status_code == 400 and r.json()["field"] == "key", r.text
        assert "base64" in r.json()["error"], r.text
    r = httpx.get(f"{cluster.url(0)}/v1/messages", params={"topic": TOPIC, "key": "k", "key_encoding": "hex"},
                  timeout=30)
    assert r.status_code == 400 and r.json()["field"] == "key_encoding", r.text
    got = subprocess.run([MQINDEX, "query", TOPIC, "not base64!", "--base64", "--url", cluster.url(0)],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and "base64" in got.stderr, (got.returncode, got.stderr)
