"""A node whose WAL failed answers produce with KAFKA_STORAGE_ERROR (56), which clients retry after refreshing
the metadata, not UNKNOWN_SERVER_ERROR (-1), which librdkafka took as permanent and failed the records with,
though the partition is served again by another node once the failed node's lease runs out.

Two real `mqindex serve` nodes on PostgreSQL metadata and a shared WAL on a SeaweedFS of the test's own, which
the test stops: the node that writes next fails its WAL for good. The store comes back, the failed node stops
renewing its lease and the other node fails its partition over from the shared WAL; an idempotent
confluent-kafka producer that was sending meanwhile has every record delivered once, in order."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import KafkaStorageError

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess, kafka_nodes, read_until_quiet
from tests.kafka.wire import Wire

TOPIC = "wal-fails"


@pytest.fixture
def two_nodes(tmp_path: Path, seaweedfs: SeaweedFS, wal_store: SeaweedFS, pg_url: Callable[[], str]
              ) -> Iterator[list[KafkaServerProcess]]:
    prefix = f"walf-{uuid.uuid4().hex[:8]}"
    # a retry bound of 3 s on the WAL's store, so that the victim's WAL fails in seconds (the default bound is 30 s)
    store, meta = seaweedfs.store_url("mqindex", prefix), pg_url()
    wal = wal_store.store_url("wal", prefix, retry_seconds="3")
    with kafka_nodes(tmp_path, 2, {TOPIC: 2}, "--store", store, "--wal", wal, "--metadata", meta,
                     "--lease-ms", "3000") as made:
        yield made


def leaders(nodes: list[KafkaServerProcess]) -> dict[int, int]:
    for s in nodes:
        if s.proc is not None and s.proc.poll() is None:
            with Wire(s.kafka_port) as w:
                meta = w.call((3, 1), topics=[dict(name=TOPIC)])
            return {p.partition_index: p.leader_id for t in meta.topics for p in t.partitions}
    raise AssertionError("no node running")


def read_partition(bootstrap: str, partition: int, expect: int, timeout: float = 60) -> list[bytes]:
    return [bytes(m.value() or b"") for m in read_until_quiet(bootstrap, [(TOPIC, partition)], expect, timeout)]


@pytest.mark.slow(seconds=60)  # the WAL's put retried for 3 s, a SeaweedFS started again, a lease to expire
def test_a_failed_wal_is_a_retriable_storage_error_and_an_idempotent_producer_loses_nothing(
        two_nodes: list[KafkaServerProcess], wal_store: SeaweedFS) -> None:
    nodes = two_nodes
    bootstrap = ",".join(s.bootstrap for s in nodes)
    part = 0
    victim = leaders(nodes)[part]
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.timeout.ms": 180_000,
                  "linger.ms": 5})
    failed: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    try:
        for i in range(20):
            p.produce(TOPIC, value=b"before-%d" % i, partition=part, on_delivery=report)
        assert p.flush(30) == 0 and not failed

        wal_store.stop()  # the shared WAL's store is gone: the next write on the victim fails its WAL for good

        # a real client with no retries sees the code: KAFKA_STORAGE_ERROR (56), retriable, refresh the metadata.
        # Twice: the first append fails in the WAL writer, the second is refused before it reaches the WAL
        kp = KafkaProducer(bootstrap_servers=nodes[victim].bootstrap, retries=0, acks=1,
                           enable_idempotence=False, request_timeout_ms=60_000, max_block_ms=30_000)
        try:
            for i in range(2):
                with pytest.raises(KafkaStorageError) as refused:
                    kp.send(TOPIC, value=b"refused-%d" % i, partition=part).get(timeout=90)
                assert refused.value.retriable and refused.value.invalid_metadata
        finally:
            kp.close(timeout=5)

        for i in range(20):  # refused (56) while the victim is failed, retried by librdkafka until served again
            p.produce(TOPIC, value=b"during-%d" % i, partition=part, on_delivery=report)
        p.poll(2)
        assert not failed, failed
        wal_store.start(bucket="wal")  # the survivor replays the failed node's WAL from it
        wait_for("the survivor serving the partition", lambda: leaders(nodes)[part] != victim, timeout=90,
                 interval=0.5)
        assert p.flush(150) == 0
        assert not failed, failed
    finally:
        p.purge()
        p.flush(5)
        p.close()
    got = read_partition(bootstrap, part, 40)
    assert got == [b"before-%d" % i for i in range(20)] + [b"during-%d" % i for i in range(20)]
