"""confluent-kafka (librdkafka) and kcat against `mqindex serve`: each compression codec stored as sent and
indexed, an idempotent producer, kill -9 during acks=all produce, `kcat -L`."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.conftest import KafkaServerProcess


def create(bootstrap: str, topic: str, partitions: int, conf: dict[str, str] | None = None) -> None:
    admin = AdminClient(conf or {"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def read(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 30,
         conf: dict[str, str] | None = None) -> list:
    c = Consumer((conf or {"bootstrap.servers": bootstrap}) | {"group.id": f"reader-{topic}",
                                                               "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                out.append(m)
        return out
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_each_codec_round_trip_and_index(kafka_server: KafkaServerProcess, codec: str) -> None:
    topic = f"c-{codec}"
    create(kafka_server.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": kafka_server.bootstrap, "compression.type": codec, "acks": "all",
                  "linger.ms": 20})
    for i in range(200):
        p.produce(topic, key=f"{codec}-{i}".encode(), value=b"x" * 100 + str(i).encode(),
                  headers=[("UNIQ_KEY", f"u-{codec}-{i}".encode())], timestamp=1_700_000_000_000 + i)
    assert p.flush(30) == 0
    got = read(kafka_server.bootstrap, topic, 2, 200)
    assert sorted(m.key() for m in got) == sorted(f"{codec}-{i}".encode() for i in range(200))
    assert {m.timestamp()[1] for m in got} == {1_700_000_000_000 + i for i in range(200)}
    r = httpx.get(kafka_server.url + "/v1/messages", params={"topic": topic, "key": f"u-{codec}-17"}, timeout=30)
    assert r.status_code == 200 and len(r.json()["messages"]) == 1, r.text


def test_idempotent_producer_and_kcat(kafka_server: KafkaServerProcess) -> None:
    create(kafka_server.bootstrap, "idem", 1)
    p = Producer({"bootstrap.servers": kafka_server.bootstrap, "enable.idempotence": True, "linger.ms": 1})
    for i in range(500):
        p.produce("idem", key=str(i).encode(), value=str(i).encode())
    assert p.flush(30) == 0
    got = read(kafka_server.bootstrap, "idem", 1, 500)
    assert [int(m.value()) for m in got] == list(range(500))
    out = subprocess.run(["kcat", "-b", kafka_server.bootstrap, "-L"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert 'topic "idem" with 1 partitions' in out.stdout, out.stdout


def test_kill_9_during_acks_all_loses_no_acknowledged_record(kafka_server: KafkaServerProcess) -> None:
    create(kafka_server.bootstrap, "durable", 2)
    acked: list[bytes] = []
    lock = threading.Lock()

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            with lock:
                acked.append(msg.value())  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": kafka_server.bootstrap, "acks": "all", "linger.ms": 2,
                  "message.timeout.ms": 5000, "retries": 0})
    i = 0
    deadline = time.monotonic() + 30
    while len(acked) < 300 and time.monotonic() < deadline:
        p.produce("durable", value=f"m{i}".encode(), on_delivery=on_delivery)
        i += 1
        p.poll(0)
    assert len(acked) >= 300
    kafka_server.stop(signal.SIGKILL)
    p.flush(10)  # what was in flight fails; only the acknowledged ones count
    kafka_server.start()
    with lock:
        want = set(acked)
    got = {m.value() for m in read(kafka_server.bootstrap, "durable", 2, i, timeout=20)}
    assert want <= got, f"{len(want - got)} acknowledged records lost"
