"""A key that is not UTF-8 (a schema registry's key: a magic byte, a schema id, Avro bytes), produced by a Kafka
client, comes back over HTTP as base64 with `"key_encoding": "base64"` (a page of a partition and a message by id)
and in the CLI as `base64:...`: never as text with U+FFFD in place of its bytes. A UTF-8 key stays text."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import httpx
from confluent_kafka import Producer

from tests.kafka.conftest import KafkaServerProcess

BINARY_KEY = b"\x00\x00\x00\x00\x07\xff\xfe\x02"  # magic byte 0, schema id 7, then bytes that are not UTF-8
MQINDEX = str(Path(sys.executable).parent / "mqindex")


def test_a_binary_key_comes_back_whole(kafka_server: KafkaServerProcess) -> None:
    base = kafka_server.url
    assert httpx.post(f"{base}/v1/topics", json={"name": "avro", "partitions": 1}, timeout=30).status_code == 201
    p = Producer({"bootstrap.servers": kafka_server.bootstrap})
    p.produce("avro", b"binary-keyed", key=BINARY_KEY)
    p.produce("avro", b"text-keyed", key=b"order-1")
    assert p.flush(30) == 0

    page = httpx.get(f"{base}/v1/topics/avro/partitions/0/messages", params={"offset": 0, "max": 10}, timeout=30)
    assert page.status_code == 200, page.text
    binary, text = page.json()["messages"]
    assert (binary["key_encoding"], base64.b64decode(binary["key"]), binary["value"]) == (
        "base64", BINARY_KEY, "binary-keyed")
    assert (text["key_encoding"], text["key"]) == ("utf-8", "order-1")
    by_id = httpx.get(f"{base}/v1/messages/{binary['msg_id']}", timeout=30).json()
    assert (by_id["key_encoding"], base64.b64decode(by_id["key"])) == ("base64", BINARY_KEY)

    shown = subprocess.run([MQINDEX, "consume", "avro", "-p", "0", "-n", "2", "--url", base], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"base64:{base64.b64encode(BINARY_KEY).decode()}" in shown.stdout and "order-1" in shown.stdout
    assert "\ufffd" not in shown.stdout
    as_json = subprocess.run([MQINDEX, "get", binary["msg_id"], "--json", "--url", base], capture_output=True,
                             text=True, timeout=60)
    assert json.loads(as_json.stdout)["key_encoding"] == "base64", as_json.stderr
