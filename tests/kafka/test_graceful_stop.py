"""A node stopped cleanly (SIGTERM: a rolling restart) under an idempotent producer: the producer goes on with the
node that takes the partitions over, every acknowledged record is stored once and no delivery fails; a client
still talking to the stopping node is answered NOT_LEADER_OR_FOLLOWER while it hands its partitions over.

Before, the Kafka listener closed before the node (a client met a closed port for the whole close), and a request
that reached a closing node was answered UNKNOWN_SERVER_ERROR ("the broker node is closed" inside the broker),
which librdkafka and the Java client take as permanent: the records failed in the delivery report. A closing node
now answers as Kafka's does during its controlled shutdown, for a partition it no longer leads:
NOT_LEADER_OR_FOLLOWER (NOT_COORDINATOR for a coordinator's request), and stops listening after its close.

Two real `mqindex serve` nodes on PostgreSQL metadata and a SeaweedFS object store, a confluent-kafka idempotent
producer sending all along from a thread of the test and a raw connection producing to the stopping node one
request after the other. Every wait is on a condition with a bound."""

from __future__ import annotations

import signal
import threading
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from api.kafka import errors
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess, kafka_nodes, read_until_quiet
from tests.kafka.test_every_version import batch
from tests.kafka.wire import Wire

TOPIC = "rolling"
PARTS = 4


@pytest.fixture
def two_nodes(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[list[KafkaServerProcess]]:
    store = seaweedfs.store_url("mqindex", f"graceful-{uuid.uuid4().hex[:8]}")
    with kafka_nodes(tmp_path, 2, {TOPIC: PARTS}, "--store", store, "--metadata", pg_url(),
                     "--lease-ms", "5000") as made:
        yield made


def leaders(node: KafkaServerProcess) -> dict[int, int]:
    with Wire(node.kafka_port) as w:
        meta = w.call((3, 1), topics=[dict(name=TOPIC)])
    return {p.partition_index: p.leader_id for t in meta.topics for p in t.partitions}


def group_of(node_id: int) -> str:
    """A group id the node `node_id` coordinates while both nodes live (crc32 over the sorted ids: context.py)."""
    return next(g for g in (f"probe-group-{i}" for i in range(100)) if zlib.crc32(g.encode()) % 2 == node_id)


def probe(node: KafkaServerProcess, partition: int, group: str, codes: list[int], commits: list[int]) -> None:
    """On one connection to `node`, one request after the other: a produce to `partition` (its code added to
    `codes`) and an offset commit of `group` (to `commits`), until the connection closes (the node stopped
    listening)."""
    with Wire(node.kafka_port, timeout=60) as w:
        for i in range(1_000_000):
            try:
                resp = w.call((0, 9), transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[dict(
                    name=TOPIC, partition_data=[dict(index=partition, records=batch(b"probe-%d" % i))])])
                codes.append(int(resp.responses[0].partition_responses[0].error_code))
                commits.extend(w.commit(group, -1, "", {(TOPIC, partition): i}))
            except (AssertionError, OSError):  # closed: what came before is the answer
                return


def read_all(bootstrap: str, expect: int, timeout: float = 60) -> list[bytes]:
    """Every record of the topic's partitions, read until `expect` are in and a second passes without more."""
    return [bytes(m.value() or b"") for m in
            read_until_quiet(bootstrap, [(TOPIC, p) for p in range(PARTS)], expect, timeout)]


@pytest.mark.slow(seconds=60)  # a clean stop hands the partitions over; the producer follows them
def test_an_idempotent_producer_loses_nothing_while_a_node_stops_cleanly(
        two_nodes: list[KafkaServerProcess]) -> None:
    nodes = two_nodes
    led = leaders(nodes[0])
    victim_id = max({0, 1}, key=lambda n: sum(1 for leader in led.values() if leader == n))
    victim, survivor = nodes[victim_id], nodes[1 - victim_id]
    victim_partition = next(p for p, leader in led.items() if leader == victim_id)
    probed: list[int] = []
    committed: list[int] = []
    fatal: list[KafkaError] = []
    failed: list[KafkaError] = []
    acked: list[bytes] = []
    p = Producer({"bootstrap.servers": ",".join(s.bootstrap for s in nodes), "enable.idempotence": True,
                  "message.timeout.ms": 120_000, "linger.ms": 5,
                  "error_cb": lambda err: fatal.append(err) if err.fatal() else None})

    def report(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked.append(bytes(msg.value()))  # type: ignore[attr-defined]

    stop = threading.Event()
    sent = [0]

    def send() -> None:  # records to every partition, all along, until told to stop
        while not stop.is_set():
            for _ in range(20):
                p.produce(TOPIC, value=b"r-%d" % sent[0], partition=sent[0] % PARTS, on_delivery=report)
                sent[0] += 1
            p.poll(0)
            stop.wait(0.01)

    sender = threading.Thread(target=send, name="test-producer")
    sender.start()
    prober = threading.Thread(target=probe, args=(victim, victim_partition, group_of(victim_id), probed, committed),
                              name="test-probe")
    try:
        wait_for("records acknowledged before the stop", lambda: len(acked) >= 500, timeout=60)
        prober.start()
        wait_for("the probe's produce and commit served", lambda: errors.NONE in probed and errors.NONE in committed,
                 timeout=30)
        assert victim.stop() == 0  # SIGTERM: the clean stop of a rolling restart
        prober.join(60)
        assert not prober.is_alive()
        # the closing node answered a client still talking to it as a node that no longer leads the partition,
        # until it stopped listening: never UNKNOWN_SERVER_ERROR, never a closed port while it hands over
        assert set(probed) <= {errors.NONE, errors.NOT_LEADER_OR_FOLLOWER}, Counter(probed)
        assert errors.NOT_LEADER_OR_FOLLOWER in probed, Counter(probed)
        # and its group coordinator's requests as a node that no longer coordinates the group
        assert set(committed) <= {errors.NONE, errors.NOT_COORDINATOR}, Counter(committed)
        assert errors.NOT_COORDINATOR in committed, Counter(committed)
        at_stop = len(acked)
        wait_for("records acknowledged after the stop, by the survivor",
                 lambda: len(acked) >= at_stop + 1000 or bool(failed or fatal), timeout=90)
        stop.set()
        sender.join(30)
        assert not sender.is_alive()
        assert p.flush(120) == 0
        assert not failed, failed[:5]
        assert not fatal, fatal
    finally:
        stop.set()
        sender.join(30)
        if prober.is_alive():  # the victim is stopped by the fixture: its connection closes then
            victim.stop(signal.SIGKILL)
            prober.join(60)
        p.purge()
        p.flush(5)
        p.close()
    assert len(acked) == sent[0]
    got = read_all(survivor.bootstrap, len(acked))
    counts = Counter(got)
    assert [v for v, n in counts.items() if n > 1] == []  # nothing stored twice
    assert set(acked) - set(counts) == set()  # every acknowledged record stored
