"""kafka-python's and aiokafka's transactional APIs beyond produce/commit/abort (tests/kafka/test_transactions.py
has those), against a real `mqindex serve`: offsets sent in a transaction become the group's committed offsets
only when it commits, and a second producer with the same transactional id fences the first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from api.kafka import errors
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_transactions import make_topics, read_all
from tests.kafka.wire import Wire


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("txn-clients") / "node").start()
    try:
        make_topics(s, {"tc-in": 1, "tc-kp": 1, "tc-aio": 1})
        yield s
    finally:
        s.stop()


def committed(s: KafkaServerProcess, group: str) -> tuple[int, int]:
    """(error code, offset) of tc-in 0 for the group, asked with require_stable."""
    with Wire(s.kafka_port) as w:
        r = w.call((9, 7), group_id=group, topics=[dict(name="tc-in", partition_indexes=[0])], require_stable=True)
    p = r.topics[0].partitions[0]
    return p.error_code, p.committed_offset


def test_kafka_python_sends_offsets_in_a_transaction_and_is_fenced_by_its_successor(
        server: KafkaServerProcess) -> None:
    from kafka import KafkaProducer, TopicPartition
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    def producer() -> KafkaProducer:
        p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tc-kafka-python", max_block_ms=30_000)
        p.init_transactions()
        return p

    first = producer()
    try:
        first.begin_transaction()
        first.send("tc-kp", key=b"kp-0", value=b"v", partition=0)
        first.send_offsets_to_transaction({TopicPartition("tc-in", 0): OffsetAndMetadata(4, "", -1)}, "tc-kp-group")
        assert committed(server, "tc-kp-group") == (errors.UNSTABLE_OFFSET_COMMIT, -1)
        first.commit_transaction()
        wait_for("the transaction's offsets committed", lambda: committed(server, "tc-kp-group") == (errors.NONE, 4))

        first.begin_transaction()
        first.send("tc-kp", key=b"kp-zombie", value=b"v", partition=0)
        first.flush()
        successor = producer()  # the same transactional id: the first producer's open transaction is aborted
        try:
            with pytest.raises(KafkaError):
                first.commit_transaction()
            successor.begin_transaction()
            successor.send("tc-kp", key=b"kp-successor", value=b"v", partition=0)
            successor.commit_transaction()
        finally:
            successor.close(timeout=10)
    finally:
        first.close(timeout=10)
    keys = [k for _, _, k, _ in read_all(server, ["tc-kp"], "read_committed", 2)]
    assert keys == [b"kp-0", b"kp-successor"]


def test_aiokafka_sends_offsets_in_a_transaction_and_is_fenced_by_its_successor(server: KafkaServerProcess) -> None:
    from aiokafka import AIOKafkaProducer, TopicPartition
    from aiokafka.errors import KafkaError

    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tc-aiokafka")
        await asyncio.wait_for(first.start(), 30)
        successor = None
        try:
            async with first.transaction():
                await first.send_and_wait("tc-aio", key=b"aio-0", value=b"v", partition=0)
                await first.send_offsets_to_transaction({TopicPartition("tc-in", 0): 6}, "tc-aio-group")
                assert committed(server, "tc-aio-group") == (errors.UNSTABLE_OFFSET_COMMIT, -1)
            deadline = asyncio.get_running_loop().time() + 20
            while committed(server, "tc-aio-group") != (errors.NONE, 6):
                assert asyncio.get_running_loop().time() < deadline, committed(server, "tc-aio-group")
                await asyncio.sleep(0.05)

            await first.begin_transaction()
            await first.send_and_wait("tc-aio", key=b"aio-aborted", value=b"v", partition=0)
            await first.send_offsets_to_transaction({TopicPartition("tc-in", 0): 9}, "tc-aio-group")
            await first.abort_transaction()
            assert committed(server, "tc-aio-group") in ((errors.NONE, 6), (errors.UNSTABLE_OFFSET_COMMIT, -1))

            await first.begin_transaction()
            await first.send_and_wait("tc-aio", key=b"aio-zombie", value=b"v", partition=0)
            successor = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tc-aiokafka")
            await asyncio.wait_for(successor.start(), 30)  # fences the first, aborting its open transaction
            with pytest.raises(KafkaError):
                await asyncio.wait_for(first.commit_transaction(), 30)
            async with successor.transaction():
                await successor.send_and_wait("tc-aio", key=b"aio-successor", value=b"v", partition=0)
        finally:
            await asyncio.wait_for(first.stop(), 10)
            if successor is not None:
                await asyncio.wait_for(successor.stop(), 10)

    asyncio.run(run())
    wait_for("the aborted transaction's offsets dropped", lambda: committed(server, "tc-aio-group") == (errors.NONE, 6))
    keys = [k for _, _, k, _ in read_all(server, ["tc-aio"], "read_committed", 2)]
    assert keys == [b"aio-0", b"aio-successor"]
