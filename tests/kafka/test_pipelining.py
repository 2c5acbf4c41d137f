"""Pipelined requests on one connection: the listener reads a connection's next requests while earlier ones
await their fsync, answers strictly in request order, and appends a partition's batches in request order."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from confluent_kafka import Producer
from kafka.record.default_records import DefaultRecordBatchBuilder

from api.kafka.schemas import APIS, build
from api.kafka.server import MAX_IN_FLIGHT
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_confluent import create, read


def _request(api_key: int, version: int, correlation_id: int, **fields: Any) -> bytes:
    req = build(APIS[api_key].request, version, **fields)
    req.with_header(correlation_id=correlation_id, client_id="pipelining-test")
    body = bytes(req.encode(header=True))
    return struct.pack(">i", len(body)) + body


def _records(first: int, count: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for delta, i in enumerate(range(first, first + count)):
        b.append(delta, timestamp=None, key=None, value=b"value-%d" % i, headers=[])
    return bytes(b.build())


def _produce(topic: str, correlation_id: int, first: int, count: int) -> bytes:
    return _request(0, 3, correlation_id, transactional_id=None, acks=-1, timeout_ms=30_000,
                    topic_data=[dict(name=topic, partition_data=[dict(index=0, records=_records(first, count))])])


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, f"connection closed after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


def _response(s: socket.socket, api_key: int, version: int) -> tuple[int, Any]:
    size, correlation_id = struct.unpack(">ii", _recv_exact(s, 8))
    return correlation_id, APIS[api_key].response.decode(_recv_exact(s, size - 4), version=version)


def test_pipelined_requests_answered_in_order(kafka_server: KafkaServerProcess) -> None:
    topic = "pipelined-raw"
    create(kafka_server.bootstrap, topic, 1)
    sent = [(18, 0, 101), (3, 1, 102), (0, 3, 103), (0, 3, 104), (0, 3, 105), (18, 0, 106)]
    frames = [_request(18, 0, 101), _request(3, 1, 102, topics=[dict(name=topic)]),
              _produce(topic, 103, 0, 5), _produce(topic, 104, 5, 7), _produce(topic, 105, 12, 3),
              _request(18, 0, 106)]
    with socket.create_connection(("127.0.0.1", kafka_server.kafka_port), timeout=30) as s:
        s.sendall(b"".join(frames))  # all at once, before reading any answer
        answers = [_response(s, api_key, version) for api_key, version, _ in sent]
    assert [c for c, _ in answers] == [c for _, _, c in sent]
    assert answers[0][1].error_code == 0 and answers[5][1].error_code == 0
    assert [t.name for t in answers[1][1].topics] == [topic]
    produced = [r.responses[0].partition_responses[0] for _, r in answers[2:5]]
    assert [(p.error_code, p.base_offset) for p in produced] == [(0, 0), (0, 5), (0, 12)]
    stored = read(kafka_server.bootstrap, topic, 1, 15)
    assert [(m.offset(), m.value()) for m in stored] == [(i, b"value-%d" % i) for i in range(15)]


def test_more_requests_than_the_in_flight_limit_all_answered_in_order(kafka_server: KafkaServerProcess) -> None:
    """Three times MAX_IN_FLIGHT produce requests sent at once: the reader waits for room, the writer sends the
    answers a group commit makes ready together in one write, and every answer comes once, in request order."""
    topic = "pipelined-many"
    create(kafka_server.bootstrap, topic, 1)
    n = 3 * MAX_IN_FLIGHT
    with socket.create_connection(("127.0.0.1", kafka_server.kafka_port), timeout=30) as s:
        s.sendall(b"".join(_produce(topic, 700 + i, 3 * i, 3) for i in range(n)))
        answers = [_response(s, 0, 3) for _ in range(n)]
    assert [c for c, _ in answers] == [700 + i for i in range(n)]
    assert [(r.responses[0].partition_responses[0].error_code, r.responses[0].partition_responses[0].base_offset)
            for _, r in answers] == [(0, 3 * i) for i in range(n)]
    stored = read(kafka_server.bootstrap, topic, 1, 3 * n)
    assert [(m.offset(), m.value()) for m in stored] == [(i, b"value-%d" % i) for i in range(3 * n)]


def test_idempotent_producer_with_five_in_flight_keeps_order(kafka_server: KafkaServerProcess) -> None:
    topic = "pipelined-idempotent"
    create(kafka_server.bootstrap, topic, 1)
    failed: list[object] = []
    acked: list[tuple[int, bytes]] = []

    def on_delivery(err: object, msg: Any) -> None:
        (failed.append(err) if err is not None else acked.append((msg.offset(), msg.value())))

    p = Producer({"bootstrap.servers": kafka_server.bootstrap, "enable.idempotence": True, "acks": "all",
                  "max.in.flight.requests.per.connection": 5, "linger.ms": 0, "batch.size": 4096,
                  "on_delivery": on_delivery})
    count = 3000
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=b"%06d" % i + b"x" * 500, partition=0)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    deadline = time.monotonic() + 60
    while len(acked) + len(failed) < count and time.monotonic() < deadline:
        p.poll(0.2)
    assert not failed and len(acked) == count
    assert sorted(acked) == [(i, b"%06d" % i + b"x" * 500) for i in range(count)]  # offsets follow send order
    stored = read(kafka_server.bootstrap, topic, 1, count, timeout=60)
    assert [(m.offset(), m.value()[:6]) for m in stored] == [(i, b"%06d" % i) for i in range(count)]


def test_malformed_request_in_a_pipeline_closes_after_the_earlier_answers(kafka_server: KafkaServerProcess) -> None:
    topic = "pipelined-malformed"
    create(kafka_server.bootstrap, topic, 1)
    junk = struct.pack(">i", 12) + struct.pack(">hhi", 99, 0, 203) + b"\x00" * 4  # unknown API key
    with socket.create_connection(("127.0.0.1", kafka_server.kafka_port), timeout=30) as s:
        s.sendall(_produce(topic, 201, 0, 4) + _request(18, 0, 202) + junk + _request(18, 0, 204))
        first, produced = _response(s, 0, 3)
        second, versions = _response(s, 18, 0)
        assert (first, second) == (201, 202)
        assert produced.responses[0].partition_responses[0].base_offset == 0 and versions.error_code == 0
        assert s.recv(100) == b""  # closed: nothing answered after the malformed request
    with socket.create_connection(("127.0.0.1", kafka_server.kafka_port), timeout=30) as s:  # still serving
        s.sendall(_produce(topic, 301, 4, 2))
        assert _response(s, 0, 3)[1].responses[0].partition_responses[0].base_offset == 4


def test_connection_closed_with_requests_in_flight(kafka_server: KafkaServerProcess) -> None:
    topic = "pipelined-closed"
    create(kafka_server.bootstrap, topic, 1)
    with socket.create_connection(("127.0.0.1", kafka_server.kafka_port), timeout=30) as s:
        s.sendall(b"".join(_produce(topic, 400 + n, 10 * n, 10) for n in range(6)))
    # the requests it read before the end of the connection (a reset may cut the rest) are stored whole and
    # in order; the server goes on serving
    with socket.create_connection(("127.0.0.1", kafka_server.kafka_port), timeout=30) as s:
        s.sendall(_produce(topic, 500, 60, 10))
        after = _response(s, 0, 3)[1].responses[0].partition_responses[0]
    assert after.error_code == 0 and after.base_offset % 10 == 0 and after.base_offset <= 60
    stored = read(kafka_server.bootstrap, topic, 1, after.base_offset + 10)
    kept = list(range(after.base_offset)) + list(range(60, 70))
    assert [(m.offset(), m.value()) for m in stored] == [(n, b"value-%d" % i) for n, i in enumerate(kept)]
