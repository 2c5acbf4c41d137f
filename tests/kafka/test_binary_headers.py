"""Record headers come back whole (docs/MESSAGES.md): a binary value (a tracing id, a serializer's type id), a name
given twice and a null value, produced by a Kafka client, are read back byte for byte over HTTP (a page of a
partition, a key lookup, a message by id) and by the CLI (`--json`, and `base64:...` / `(null)` in its text), through
`header_list`, which a message has only when its `headers` object cannot hold its headers exactly; a message whose
headers are unique UTF-8 names and values is answered as before. What HTTP produce takes in `header_list` a Kafka
consumer reads back as sent."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, Producer

from tests.kafka.conftest import KafkaServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")
TRACE = b"\x00\x01\xff\xfe\x80\x7f trace"  # not UTF-8
HEADERS: list[tuple[str, bytes | None]] = [
    ("trace-id", TRACE),
    ("KEYS", b"cust-1"),
    ("KEYS", b"cust-2"),  # the same name twice
    ("gone", None),  # a null value
    ("type", "Bestellung-\u00fc".encode()),
    ("empty", b""),
]
PLAIN = [("app", b"web"), ("KEYS", b"cust-3")]


def as_bytes(header_list: list[dict[str, Any]]) -> list[tuple[str, bytes | None]]:
    """The headers a message's header_list says, as bytes."""
    out: list[tuple[str, bytes | None]] = []
    for h in header_list:
        assert set(h) == {"name", "value", "encoding"}, h
        v = h["value"]
        out.append((h["name"], None if v is None else base64.b64decode(v) if h["encoding"] == "base64" else v.encode()))
    return out


def check_whole(m: dict[str, Any]) -> None:
    """The message with HEADERS: every header in order, every byte; `headers` as it always was."""
    assert as_bytes(m["header_list"]) == HEADERS, m
    assert m["headers"] == {"trace-id": TRACE.decode(errors="replace"), "KEYS": "cust-2", "gone": "",
                            "type": "Bestellung-\u00fc", "empty": ""}
    assert list(m)[list(m).index("headers") + 1] == "header_list"  # beside headers, before the value


def check_plain(m: dict[str, Any]) -> None:
    assert "header_list" not in m and m["headers"] == {"app": "web", "KEYS": "cust-3"}, m


def mqindex(*argv: str) -> str:
    r = subprocess.run([MQINDEX, *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_headers_come_back_whole(kafka_server: KafkaServerProcess) -> None:
    base = kafka_server.url
    assert httpx.post(f"{base}/v1/topics", json={"name": "traced", "partitions": 1}, timeout=30).status_code == 201
    p = Producer({"bootstrap.servers": kafka_server.bootstrap})
    p.produce("traced", b"with headers", key=b"order-1", headers=HEADERS)
    p.produce("traced", b"plain headers", key=b"order-2", headers=PLAIN)
    assert p.flush(30) == 0

    page = httpx.get(f"{base}/v1/topics/traced/partitions/0/messages", params={"offset": 0, "max": 10}, timeout=30)
    assert page.status_code == 200, page.text
    whole, plain = page.json()["messages"]
    check_whole(whole)
    check_plain(plain)
    by_id = httpx.get(f"{base}/v1/messages/{whole['msg_id']}", timeout=30)
    assert by_id.status_code == 200 and by_id.json() == whole, by_id.text
    check_plain(httpx.get(f"{base}/v1/messages/{plain['msg_id']}", timeout=30).json())
    for key in ("order-1", "cust-1", "cust-2"):  # the record key and both KEYS headers are indexed
        found = httpx.get(f"{base}/v1/messages", params={"topic": "traced", "key": key}, timeout=30).json()["messages"]
        assert found == [whole], key
    schema = httpx.get(f"{base}/openapi.json", timeout=30).json()["components"]["schemas"]
    assert "header_list" in schema["MessageOut"]["properties"]
    assert "header_list" not in schema["MessageOut"]["required"]

    # the CLI: --json is the HTTP answer; the text shows every header, binary as base64:..., null as (null)
    check_whole(json.loads(mqindex("get", whole["msg_id"], "--json", "--url", base)))
    check_whole(json.loads(mqindex("query", "traced", "cust-1", "--json", "--url", base))[0])
    consumed = json.loads(mqindex("consume", "traced", "-p", "0", "-n", "2", "--json", "--url", base))["messages"]
    check_whole(consumed[0])
    check_plain(consumed[1])
    shown = mqindex("get", whole["msg_id"], "--url", base)
    header_part = shown[shown.index("headers:"):shown.index("value (")].splitlines()
    assert header_part == ["headers:", f"  trace-id: base64:{base64.b64encode(TRACE).decode()}", "  KEYS: cust-1",
                           "  KEYS: cust-2", "  gone: (null)", "  type: Bestellung-\u00fc", "  empty: "], shown
    assert "\ufffd" not in shown
    shown = mqindex("get", plain["msg_id"], "--url", base)
    assert shown[shown.index("headers:"):shown.index("value (")].splitlines() == [
        "headers:", "  app: web", "  KEYS: cust-3"], shown


def test_http_produce_takes_header_list(kafka_server: KafkaServerProcess) -> None:
    """A header_list sent over HTTP is stored as sent: a Kafka consumer reads the same headers, byte for byte, and
    HTTP answers them back; both headers and header_list with headers in them is refused naming the field."""
    base = kafka_server.url
    assert httpx.post(f"{base}/v1/topics", json={"name": "sent", "partitions": 1}, timeout=30).status_code == 201
    sent = [{"name": n, "value": None if v is None else base64.b64encode(v).decode(), "encoding": "base64"}
            for n, v in HEADERS]
    sent[4] = {"name": "type", "value": "Bestellung-\u00fc"}  # text: encoding utf-8 by default
    r = httpx.post(f"{base}/v1/topics/sent/messages", timeout=30,
                   json={"messages": [{"key": "order-9", "value": "v", "header_list": sent}]})
    assert r.status_code == 200, r.text
    check_whole(httpx.get(f"{base}/v1/messages/{r.json()['results'][0]['msg_id']}", timeout=30).json())
    assert [m["value"] for m in httpx.get(f"{base}/v1/messages", params={"topic": "sent", "key": "cust-2"},
                                          timeout=30).json()["messages"]] == ["v"]  # KEYS of header_list indexed

    c = Consumer({"bootstrap.servers": kafka_server.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["sent"])
        got = None
        for _ in range(60):
            got = c.poll(1.0)
            if got is not None and got.error() is None:
                break
        assert got is not None and got.error() is None, got
        assert got.headers() == HEADERS
    finally:
        c.close()

    both = httpx.post(f"{base}/v1/topics/sent/messages", timeout=30, json={"messages": [
        {"value": "v", "headers": {"a": "1"}, "header_list": [{"name": "b", "value": "2"}]}]})
    assert both.status_code == 400 and both.json()["field"] == "messages.0.header_list", both.text
    bad = httpx.post(f"{base}/v1/topics/sent/messages", timeout=30, json={"messages": [
        {"value": "v", "header_list": [{"name": "b", "value": "not base64!", "encoding": "base64"}]}]})
    assert bad.status_code == 400 and bad.json()["field"] == "messages.0.header_list.0.value", bad.text
    dup = mqindex("produce", "sent", "x", "--header", "KEYS=a", "--header", "KEYS=b", "--json", "--url", base)
    m = httpx.get(f"{base}/v1/messages/{json.loads(dup)[0]['msg_id']}", timeout=30).json()
    assert as_bytes(m["header_list"]) == [("KEYS", b"a"), ("KEYS", b"b")]  # the CLI sends a name given twice twice
