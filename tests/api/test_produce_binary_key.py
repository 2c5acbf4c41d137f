"""Keys that are not UTF-8 produced over HTTP (`"key_encoding": "base64"`) and the CLI (`--key-base64`) on a real
`mqindex serve` with its Kafka listener, as a user does it: found by a `key_encoding=base64` lookup and
`mqindex query --base64`, and read by a confluent-kafka consumer as the exact bytes. Bad base64 is a 400 naming the
message (exit 2 for the CLI), and nothing of the request is stored. Before, the produce body had no way to give a
key's bytes (`key_encoding` was an unknown field) and the CLI sent --key as text."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.http.routes import _produce_messages
from tests.kafka.conftest import KafkaServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")
TOPIC = "binary-keys"
HTTP_KEY = b"\x00\xff\x01\xfe order"  # not UTF-8
CLI_KEY = b"\x80\x81\x82"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("binary-keys") / "node").start()
    try:
        r = httpx.post(f"{s.url}/v1/topics", json={"name": TOPIC, "partitions": 1}, timeout=30)
        assert r.status_code == 201, r.text
        yield s
    finally:
        s.stop()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def produce(server: KafkaServerProcess, messages: list[dict[str, object]], topic: str = TOPIC) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/topics/{topic}/messages", json={"messages": messages}, timeout=30)


def lookup(server: KafkaServerProcess, key: bytes, topic: str = TOPIC) -> list[dict[str, object]]:
    r = httpx.get(f"{server.url}/v1/messages", params={"topic": topic, "key": b64(key), "key_encoding": "base64"},
                  timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["messages"]  # type: ignore[no-any-return]


def is_text(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MQINDEX, *args], capture_output=True, text=True, timeout=60)


def end_offset(server: KafkaServerProcess, topic: str = TOPIC) -> int:
    r = httpx.get(f"{server.url}/v1/console/partitions", params={"topic": topic}, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["partitions"][0]["end_offset"])


def test_binary_keys_produced_over_http_and_the_cli_are_found_and_consumed_as_their_bytes(
        server: KafkaServerProcess) -> None:
    base = end_offset(server)
    r = produce(server, [{"key": b64(HTTP_KEY), "key_encoding": "base64", "value": "by http"},
                         {"key": "text-key", "key_encoding": "utf-8", "value": "text"}])
    assert r.status_code == 200, r.text
    shown = cli("produce", TOPIC, "by cli", "--key", "base64:" + b64(CLI_KEY), "--key-base64", "--url", server.url,
                "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)[0]["offset"] == base + 2

    [found] = lookup(server, HTTP_KEY)
    assert (found["key"], found["key_encoding"], found["value"], found["offset"]) == (b64(HTTP_KEY), "base64",
                                                                                       "by http", base)
    [found] = lookup(server, CLI_KEY)
    assert (found["key"], found["key_encoding"], found["value"]) == (b64(CLI_KEY), "base64", "by cli")
    q = cli("query", TOPIC, b64(HTTP_KEY), "--base64", "--url", server.url, "--json")
    assert q.returncode == 0, q.stderr
    assert [(m["key"], m["value"]) for m in json.loads(q.stdout)] == [(b64(HTTP_KEY), "by http")]

    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "binary-keys-reader",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, 0, base)])
        got: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.key(), m.value()))
    finally:
        c.close()
    assert got == [(HTTP_KEY, b"by http"), (b"text-key", b"text"), (CLI_KEY, b"by cli")]


def test_bad_base64_names_the_message_and_stores_nothing(server: KafkaServerProcess) -> None:
    before = end_offset(server)
    good = {"key": b64(b"\xfa\xfb"), "key_encoding": "base64", "value": "never stored"}
    for bad, why in (("AP8%", "not the alphabet"), ("AP8", "no padding"), ("w7=", "bad padding"),
                     ("é", "not ASCII")):
        r = produce(server, [good, good, {"key": bad, "key_encoding": "base64", "value": "v"}])
        assert r.status_code == 400, (why, r.text)
        assert r.json() == {"error": "messages.2.key is not valid base64 (standard alphabet, with its = padding)",
                            "field": "messages.2.key"}, why
    r = produce(server, [{"key": "k", "key_encoding": "hex", "value": "v"}])
    assert r.status_code == 400 and r.json()["field"] == "messages.0.key_encoding", r.text
    assert "'utf-8' or 'base64'" in r.json()["error"]

    for args in (("--key", "AP8%", "--key-base64"), ("--key", "base64:AP8", "--key-base64"), ("--key-base64",)):
        r2 = cli("produce", TOPIC, "never stored", *args, "--url", server.url)
        lines = r2.stderr.strip().splitlines()
        assert (r2.returncode, r2.stdout) == (2, ""), r2.stderr
        assert lines[0].startswith("usage: mqindex produce "), r2.stderr
    assert lines[-1] == "mqindex produce: error: --key-base64: give the key's base64 with --key"
    assert cli("produce", TOPIC, "v", "--key", "AP8%", "--key-base64", "--url", server.url).stderr \
        .strip().splitlines()[-1] == ("mqindex produce: error: --key 'AP8%' is not the base64 of a key (standard "
                                      "alphabet, with its = padding)")
    assert end_offset(server) == before
    assert lookup(server, b"\xfa\xfb") == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.binary(max_size=40))
def test_any_key_bytes_come_back_from_a_lookup_by_their_base64(server: KafkaServerProcess, key: bytes) -> None:
    r = produce(server, [{"key": b64(key), "key_encoding": "base64", "value": "p"}], topic=TOPIC)
    assert r.status_code == 200, r.text
    if key:  # an empty key is stored (Kafka's empty key, not a null one) but is not looked up
        found = lookup(server, key)
        want = (key.decode(), "utf-8") if is_text(key) else (b64(key), "base64")  # shown as a read shows it
        assert found and {(m["key"], m["key_encoding"]) for m in found} == {want}, found


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(st.one_of(st.none(), st.binary(max_size=20), st.text(st.characters(codec="utf-8"), max_size=10)),
                     min_size=1, max_size=5))
def test_the_produce_body_gives_each_key_as_bytes(keys: list[bytes | str | None]) -> None:
    """The body parser: a key given as base64 is its bytes, a text key its UTF-8, null no key."""
    body = {"messages": [{"value": "v"} | ({"key": k} if isinstance(k, str) else
                                          {"key": None if k is None else b64(k), "key_encoding": "base64"})
                         for k in keys]}
    got = [m.key for m in _produce_messages(json.dumps(body).encode())]
    assert got == [k.encode() if isinstance(k, str) else k for k in keys]
