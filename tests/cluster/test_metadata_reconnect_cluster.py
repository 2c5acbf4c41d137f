"""Three nodes whose PostgreSQL metadata connections all end at once serve again without a restart (new-user
walkthrough: in a three-node cluster every node answered 500 and closed every Kafka connection after
`pg_terminate_backend`, until each was restarted). Real `mqindex serve` nodes with Kafka listeners on a database of
the test's own (tests/api/test_metadata_reconnect.py), a confluent-kafka producer before and after, every record
read back."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import wait_for
from tests.api.test_metadata_reconnect import OwnDatabase, own_db  # noqa: F401 - the fixture
from tests.cluster.harness import kafka_cluster

TOPIC = "orders"
PARTITIONS = 3


def _send(bootstrap: str, values: list[bytes]) -> None:
    failed: list[KafkaError] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.timeout.ms": 60_000,
                  "log_level": 0})
    for v in values:
        p.produce(TOPIC, value=v, key=v, on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert p.flush(90) == 0
    assert not failed, failed


def _read_all(bootstrap: str, expect: int, timeout: float = 60) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}", "log_level": 0,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(bytes(m.value() or b""))
        return out
    finally:
        c.close()


def test_three_nodes_serve_again_after_every_metadata_connection_ended(
        tmp_path: Path, seaweedfs: SeaweedFS, own_db: OwnDatabase) -> None:  # noqa: F811 - the fixture
    store = seaweedfs.store_url("mqindex", f"reconnect-{uuid.uuid4().hex[:8]}")
    with kafka_cluster(tmp_path, store, f"{own_db.dsn}?schema=m", 3) as c:
        r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=60)
        assert r.status_code == 201, r.text
        bootstrap = ",".join(f"127.0.0.1:{c.nodes[n].kafka_port}" for n in c.running())  # type: ignore[attr-defined]
        before = [b"before-%d" % i for i in range(30)]
        _send(bootstrap, before)

        assert own_db.terminate() >= 3

        def serving(n: int) -> bool:
            with httpx.Client(base_url=c.url(n), timeout=10) as h:
                return (h.get("/healthz/ready").status_code == 200 and h.get("/v1/topics").status_code == 200
                        and h.get("/v1/messages", params={"topic": TOPIC, "key": "before-7"}).status_code == 200)

        wait_for("every node serving again", lambda: all(serving(n) for n in c.running()), timeout=60, interval=0.5)
        after = [b"after-%d" % i for i in range(30)]
        _send(bootstrap, after)
        assert sorted(_read_all(bootstrap, 60)) == sorted(before + after)
        for n in c.running():
            log = c.nodes[n].log.read_text()
            assert "Traceback" not in log and "kafka request failed" not in log, log[-3000:]
