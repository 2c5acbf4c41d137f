"""An idempotent confluent-kafka producer whose connections are cut for real (a TCP proxy between it and the
server, advertised to it with --kafka-advertised): every acknowledged record is stored exactly once. And a
batch the server stored but never acknowledged, retried after a kill -9 and restart, is still recognised."""

from __future__ import annotations

import itertools
import signal
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.proxy import CuttingProxy
from tests.kafka.test_confluent import create, read


def proxied(tmp_path: Path, budgets: list[int | None]) -> tuple[KafkaServerProcess, CuttingProxy]:
    server = KafkaServerProcess(tmp_path / "node")
    proxy = CuttingProxy(("127.0.0.1", server.kafka_port), itertools.chain(budgets, itertools.repeat(None)))
    server.extra += ["--kafka-advertised", proxy.address]
    return server, proxy


def end_offset(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)[1])
    finally:
        c.close()


def producer(bootstrap: str, delivered: list[bytes], failed: list[object]) -> Producer:
    def on_delivery(err: object, msg: object) -> None:
        (failed.append(err) if err is not None else delivered.append(msg.value()))  # type: ignore[attr-defined]

    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "message.timeout.ms": 90_000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                     "on_delivery": on_delivery})


def test_connections_cut_mid_send_store_each_record_once(tmp_path: Path) -> None:
    server, proxy = proxied(tmp_path, [8_000] * 12)
    server.start()
    try:
        create(proxy.address, "cut", 1)
        delivered: list[bytes] = []
        failed: list[object] = []
        p = producer(proxy.address, delivered, failed)
        sent = [f"m{i:05d}-".encode() + b"x" * 60 for i in range(1500)]
        for v in sent:
            p.produce("cut", value=v)
            p.poll(0)
        assert p.flush(120) == 0
        assert failed == [] and sorted(delivered) == sent
        assert proxy.cuts >= 3, f"only {proxy.cuts} connections were cut"
        assert end_offset(proxy.address, "cut") == len(sent), "a record was stored twice"
        assert [m.value() for m in read(proxy.address, "cut", 1, len(sent))] == sent
    finally:
        proxy.close()
        server.stop()


def test_retry_after_kill_9_and_restart_is_deduplicated(tmp_path: Path) -> None:
    server, proxy = proxied(tmp_path, [])
    server.start()
    try:
        create(proxy.address, "restart", 1)
        delivered: list[bytes] = []
        failed: list[object] = []
        p = producer(proxy.address, delivered, failed)
        before = [f"a{i}".encode() for i in range(50)]
        for v in before:
            p.produce("restart", value=v)
        assert p.flush(30) == 0 and sorted(delivered) == sorted(before)

        proxy.hold()  # the server stores the next batch and answers; the answer never reaches the producer
        p.produce("restart", value=b"unacknowledged")
        deadline = time.monotonic() + 20
        while proxy.dropped_bytes == 0 and time.monotonic() < deadline:
            p.poll(0.05)
        assert proxy.dropped_bytes > 0, "the server did not answer the held produce"
        server.stop(signal.SIGKILL)
        server.start()
        proxy.cut_all()  # the producer reconnects and sends the batch again, same producer id and sequence
        after = [f"b{i}".encode() for i in range(20)]
        for v in after:
            p.produce("restart", value=v)
        assert p.flush(60) == 0
        assert failed == [] and sorted(delivered) == sorted([*before, b"unacknowledged", *after])
        want = [*before, b"unacknowledged", *after]
        assert end_offset(proxy.address, "restart") == len(want), "the retried batch was stored twice"
        assert [m.value() for m in read(proxy.address, "restart", 1, len(want))] == want
    finally:
        proxy.close()
        server.stop()
