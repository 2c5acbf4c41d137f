"""Kafka transactions with real clients against a real `mqindex serve`: a confluent-kafka transactional producer
commits and aborts across partitions of two topics with its consumer offsets, read_committed consumers see
exactly the committed records (read_uncommitted ones see both), a zombie producer is fenced, key lookups over
HTTP never show an aborted or open transaction's records, and HTTP fetch shows no markers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, suppress

import httpx
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from api.kafka import errors
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess, read_until_quiet
from tests.kafka.wire import Wire

TOPICS = {"tx-a": 2, "tx-b": 1, "tx-in": 1}


def make_topics(s: KafkaServerProcess, topics: dict[str, int]) -> None:
    with Wire(s.kafka_port) as w:
        made = w.call((19, 7), topics=[dict(name=n, num_partitions=k, replication_factor=1, assignments=[],
                                            configs=[]) for n, k in topics.items()],
                      timeout_ms=10_000, validate_only=False)
        assert all(t.error_code == errors.NONE for t in made.topics), made


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("txn") / "node").start()
    try:
        make_topics(s, TOPICS)
        yield s
    finally:
        s.stop()


def producer(s: KafkaServerProcess, tid: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": s.bootstrap, "transactional.id": tid, **extra})
    try:
        p.init_transactions(30)
    except BaseException:
        p.close()
        raise
    return p


def read_all(s: KafkaServerProcess, topics: list[str], isolation: str, expect: int, timeout: float = 30
             ) -> list[tuple[str, int, bytes | None, bytes | None]]:
    """Every record of `topics` from the start, read until `expect` are in and one more second passes quiet."""
    parts = [(t, i) for t in topics for i in range(TOPICS.get(t, 1))]
    return [(m.topic(), m.partition(), m.key(), m.value())
            for m in read_until_quiet(s.bootstrap, parts, expect, timeout, isolation)]


def lookup(s: KafkaServerProcess, topic: str, key: str) -> list[dict]:
    r = httpx.get(f"{s.url}/v1/messages", params={"topic": topic, "key": key}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["messages"]


def test_commit_and_abort_across_two_topics_with_offsets(server: KafkaServerProcess) -> None:
    src = Producer({"bootstrap.servers": server.bootstrap})
    for i in range(5):
        src.produce("tx-in", key=f"in-{i}".encode(), value=b"x", partition=0)
    assert src.flush(30) == 0
    # read_uncommitted: librdkafka's default (read_committed) would wait for the open transaction's offsets
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "tx-group", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    # read_committed asks OffsetFetch with require_stable: it gets a transaction's offsets once the commit has
    # moved them (EndTxn is answered when the decision is stored; markers and offsets follow)
    stable = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "tx-group",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        p = producer(server, "tx-main")
        p.begin_transaction()
        for part, topic in ((0, "tx-a"), (1, "tx-a"), (0, "tx-b")):
            for i in range(3):
                p.produce(topic, key=f"commit-{topic}-{part}-{i}".encode(), value=b"c", partition=part)
        p.send_offsets_to_transaction([TopicPartition("tx-in", 0, 5)], consumer.consumer_group_metadata(), 30)
        # the group does not see the offsets before the commit
        assert consumer.committed([TopicPartition("tx-in", 0)], 30)[0].offset < 0
        p.commit_transaction(30)
        assert stable.committed([TopicPartition("tx-in", 0)], 30)[0].offset == 5

        p.begin_transaction()
        for part, topic in ((0, "tx-a"), (1, "tx-a"), (0, "tx-b")):
            for i in range(2):
                p.produce(topic, key=f"abort-{topic}-{part}-{i}".encode(), value=b"a", partition=part)
        p.send_offsets_to_transaction([TopicPartition("tx-in", 0, 2)], consumer.consumer_group_metadata(), 30)
        p.flush(30)
        p.abort_transaction(30)
        # the aborted transaction's offsets are dropped
        assert stable.committed([TopicPartition("tx-in", 0)], 30)[0].offset == 5
        assert consumer.committed([TopicPartition("tx-in", 0)], 30)[0].offset == 5
    finally:
        consumer.close()
        stable.close()

    committed = read_all(server, ["tx-a", "tx-b"], "read_committed", 9)
    assert sorted(k.decode() for _, _, k, _ in committed) == sorted(
        f"commit-{t}-{p}-{i}" for p, t in ((0, "tx-a"), (1, "tx-a"), (0, "tx-b")) for i in range(3))
    everything = read_all(server, ["tx-a", "tx-b"], "read_uncommitted", 15)
    assert len(everything) == 15
    assert sum(k.startswith(b"abort-") for _, _, k, _ in everything) == 6

    # over HTTP: key lookups show the committed records and never the aborted ones; fetch shows no marker
    assert [m["key"] for m in lookup(server, "tx-a", "commit-tx-a-1-2")] == ["commit-tx-a-1-2"]
    assert lookup(server, "tx-a", "abort-tx-a-1-0") == []
    assert lookup(server, "tx-b", "abort-tx-b-0-1") == []
    r = httpx.get(f"{server.url}/v1/topics/tx-b/partitions/0/messages", params={"offset": 0, "max": 100}, timeout=60)
    assert r.status_code == 200, r.text
    keys = [m["key"] for m in r.json()["messages"]]
    assert keys == [f"commit-tx-b-0-{i}" for i in range(3)] + [f"abort-tx-b-0-{i}" for i in range(2)], keys


def test_a_zombie_producer_is_fenced_and_its_transaction_aborted(server: KafkaServerProcess,
                                                                 kafka_clients: ExitStack) -> None:
    zombie = producer(server, "tx-zombie")
    try:
        zombie.begin_transaction()
        zombie.produce("tx-b", key=b"zombie-0", value=b"z", partition=0)
        assert zombie.flush(30) == 0
        # the same transactional id: the zombie's transaction is aborted
        successor = kafka_clients.enter_context(producer(server, "tx-zombie"))
        with pytest.raises(KafkaException) as fenced:
            zombie.commit_transaction(30)
        assert fenced.value.args[0].fatal(), fenced.value.args[0]
    finally:
        # a fenced producer's close() closes it and raises the fencing again (a SystemError around it in 2.16)
        with suppress(KafkaException, SystemError):
            zombie.close()
    successor.begin_transaction()
    successor.produce("tx-b", key=b"successor-0", value=b"s", partition=0)
    successor.commit_transaction(30)
    keys = {k for _, _, k, _ in read_all(server, ["tx-b"], "read_committed", 4)}  # read once the marker is in
    assert b"successor-0" in keys and b"zombie-0" not in keys
    assert lookup(server, "tx-b", "zombie-0") == []
    assert [m["key"] for m in lookup(server, "tx-b", "successor-0")] == ["successor-0"]


def test_an_open_transaction_holds_read_committed_back(server: KafkaServerProcess) -> None:
    make_topics(server, {"tx-open": 1})
    p = producer(server, "tx-open")
    p.begin_transaction()
    p.produce("tx-open", key=b"open-0", value=b"o", partition=0)
    assert p.flush(30) == 0
    with Wire(server.kafka_port) as w:
        def latest(isolation: int) -> int:
            resp = w.call((2, 7), replica_id=-1, isolation_level=isolation, topics=[
                dict(name="tx-open", partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
            return int(resp.topics[0].partitions[0].offset)
        assert (latest(0), latest(1)) == (1, 0)
        assert lookup(server, "tx-open", "open-0") == []  # an open transaction's records are not shown
        p.commit_transaction(30)
        # the record and its commit marker (written once EndTxn is answered)
        wait_for("the commit marker", lambda: (latest(0), latest(1)) == (2, 2), timeout=30)
    assert [m["key"] for m in lookup(server, "tx-open", "open-0")] == ["open-0"]


def test_kafka_python_transactional_producer(server: KafkaServerProcess) -> None:
    from kafka import KafkaProducer

    make_topics(server, {"tx-kp": 1})
    p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tx-kafka-python", max_block_ms=30_000)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send("tx-kp", key=b"kp-commit", value=b"v", partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send("tx-kp", key=b"kp-abort", value=b"v", partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    keys = [k for _, _, k, _ in read_all(server, ["tx-kp"], "read_committed", 1)]
    assert keys == [b"kp-commit"]


def test_aiokafka_transactional_producer(server: KafkaServerProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    make_topics(server, {"tx-aio": 1})

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tx-aiokafka")
        await asyncio.wait_for(p.start(), 30)
        try:
            async with p.transaction():
                await p.send_and_wait("tx-aio", key=b"aio-commit", value=b"v", partition=0)
            await p.begin_transaction()
            await p.send_and_wait("tx-aio", key=b"aio-abort", value=b"v", partition=0)
            await p.abort_transaction()
        finally:
            await asyncio.wait_for(p.stop(), 10)

    asyncio.run(run())
    keys = [k for _, _, k, _ in read_all(server, ["tx-aio"], "read_committed", 1)]
    assert keys == [b"aio-commit"]


def http_page(s: KafkaServerProcess, topic: str, offset: int, **params: object) -> tuple[list[str], int]:
    r = httpx.get(f"{s.url}/v1/topics/{topic}/partitions/0/messages", params={"offset": offset, "max": 100, **params},
                  timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert int(r.headers["X-Next-Offset"]) == body["next_offset"]
    return [m["key"] for m in body["messages"]], body["next_offset"]


def test_http_fetch_read_committed_stops_at_an_open_transaction_and_skips_aborted_ones(
        server: KafkaServerProcess) -> None:
    make_topics(server, {"tx-http": 1})
    plain = Producer({"bootstrap.servers": server.bootstrap})
    p = producer(server, "tx-http")
    p.begin_transaction()
    p.produce("tx-http", key=b"committed-0", value=b"v", partition=0)
    p.produce("tx-http", key=b"committed-1", value=b"v", partition=0)
    p.commit_transaction(30)  # offsets 0-1, marker 2
    plain.produce("tx-http", key=b"plain-0", value=b"v", partition=0)
    assert plain.flush(30) == 0  # offset 3
    p.begin_transaction()
    p.produce("tx-http", key=b"aborted-0", value=b"v", partition=0)
    assert p.flush(30) == 0
    p.abort_transaction(30)  # offset 4, marker 5
    p.begin_transaction()
    p.produce("tx-http", key=b"open-0", value=b"v", partition=0)
    assert p.flush(30) == 0  # offset 6, still open
    plain.produce("tx-http", key=b"plain-1", value=b"v", partition=0)
    assert plain.flush(30) == 0  # offset 7, after the open transaction

    everything, _ = http_page(server, "tx-http", 0)
    assert everything == ["committed-0", "committed-1", "plain-0", "aborted-0", "open-0", "plain-1"]
    committed, next_offset = http_page(server, "tx-http", 0, isolation="read_committed")
    assert committed == ["committed-0", "committed-1", "plain-0"] and next_offset == 6
    assert http_page(server, "tx-http", 6, isolation="read_committed") == ([], 6)  # ask again later
    assert http_page(server, "tx-http", 4, max=1, isolation="read_committed") == ([], 5)  # an aborted page moves on
    p.commit_transaction(30)  # marker 8, written once EndTxn is answered
    wait_for("the commit marker", lambda: http_page(server, "tx-http", 6, isolation="read_committed")[1] == 9,
             timeout=30)
    assert http_page(server, "tx-http", 6, isolation="read_committed") == (["open-0", "plain-1"], 9)
    r = httpx.get(f"{server.url}/v1/topics/tx-http/partitions/0/messages", params={"isolation": "committed"},
                  timeout=30)
    assert r.status_code == 400 and "isolation" in r.text
