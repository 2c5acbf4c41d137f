"""The 413s of HTTP produce say which limit was hit and its size, on a real `mqindex serve` with its Kafka
listener: a value over HTTP's own 1 MiB to a topic whose max.message.bytes takes more is told that it is HTTP's
cap (before: "over the limit of 1048576", which read as the topic's), and a Kafka producer does send that value;
a body over 32 MiB names HTTP's request body limit. Nothing of a refused request is stored."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from fastapi import HTTPException
from hypothesis import given, settings
from hypothesis import strategies as st

from api.http.models import MAX_REQUEST_BYTES, MAX_VALUE_BYTES
from api.http.routes import _produce_messages
from broker.partitions.message_size import Limit
from tests.kafka.conftest import KafkaServerProcess

ROOMY = 3_000_000
BIG = 1_500_000  # over HTTP's 1 MiB, under the roomy topic's max.message.bytes
HTTP_CAP = f"over HTTP's own limit of {MAX_VALUE_BYTES} bytes (1 MiB) a value"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(Path(tmp_path_factory.mktemp("value-limits")) / "node").start()
    try:
        for body in ({"name": "roomy", "partitions": 1, "configs": {"max.message.bytes": ROOMY}},
                     {"name": "plain", "partitions": 1}):
            assert httpx.post(f"{s.url}/v1/topics", json=body, timeout=30).status_code == 201
        yield s
    finally:
        s.stop()


def end_offset(server: KafkaServerProcess, topic: str) -> int:
    r = httpx.get(f"{server.url}/v1/console/partitions", params={"topic": topic}, timeout=30)
    return int(r.json()["partitions"][0]["end_offset"])


def test_a_value_over_http_s_cap_says_it_is_http_s_and_the_topic_s_own_limit(server: KafkaServerProcess) -> None:
    url = server.url
    as_text = {"messages": [{"value": "ok"}, {"value": "x" * BIG}]}
    as_base64 = {"messages": [{"value": "ok"}, {"value": base64.b64encode(b"\xff" * BIG).decode(),
                                                "encoding": "base64"}]}
    for body in (as_text, as_base64):
        r = httpx.post(f"{url}/v1/topics/roomy/messages", json=body, timeout=60)
        assert (r.status_code, r.json()) == (413, {"field": "messages.1.value", "error": (
            f"messages.1.value is {BIG} bytes, {HTTP_CAP}, whatever the topic allows (its max.message.bytes of "
            f"{ROOMY} holds for Kafka producers: send such a value with one)")})
        r = httpx.post(f"{url}/v1/topics/plain/messages", json=body, timeout=60)
        assert (r.status_code, r.json()) == (413, {"field": "messages.1.value",
                                                   "error": f"messages.1.value is {BIG} bytes, {HTTP_CAP}"})
    assert (end_offset(server, "roomy"), end_offset(server, "plain")) == (0, 0)  # nothing stored

    # what the refusal says: a Kafka producer sends that value to the roomy topic
    p = Producer({"bootstrap.servers": server.bootstrap, "message.max.bytes": 4_000_000})
    errors: list[object] = []
    p.produce("roomy", b"y" * BIG, partition=0, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(30) == 0 and errors == [None]
    assert end_offset(server, "roomy") == 1


def test_a_body_over_http_s_request_limit_names_it(server: KafkaServerProcess) -> None:
    body = json.dumps({"messages": [{"value": "z" * (MAX_REQUEST_BYTES // 2)}] * 3}).encode()
    r = httpx.post(f"{server.url}/v1/topics/roomy/messages", content=body, timeout=120,
                   headers={"content-type": "application/json"})
    assert (r.status_code, r.json()) == (413, {"field": "body", "error": (
        f"body is over HTTP's own limit of {MAX_REQUEST_BYTES} bytes (32 MiB) a request body")})


@settings(max_examples=60, deadline=None)
@given(over=st.integers(1, 2000), limit=st.one_of(st.none(), st.builds(
    Limit, st.integers(0, 4_000_000), st.sampled_from(["topic", "server"]))))
def test_the_refusal_names_the_topic_s_limit_only_when_it_would_take_the_value(over: int, limit: Limit | None) -> None:
    size = MAX_VALUE_BYTES + over
    with pytest.raises(HTTPException) as refused:
        _produce_messages(json.dumps({"messages": [{"value": "v" * size}]}).encode(), lambda: limit)
    said = refused.value.detail["error"]  # type: ignore[index]
    assert refused.value.status_code == 413 and said.startswith(f"messages.0.value is {size} bytes, {HTTP_CAP}")
    named = limit is not None and limit.source == "topic" and size <= limit.bytes
    assert (f"its max.message.bytes of {limit.bytes if limit else ''} holds" in said) == named, (said, limit)
