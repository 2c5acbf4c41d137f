"""Transactions are not served: a transactional producer of each client (confluent-kafka, kafka-python,
aiokafka) is refused at once with an error it reports as fatal, instead of waiting out its timeout; the
idempotent producer still works on the same server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import TransactionalIdAuthorizationFailed
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaProducer
from kafka.errors import TransactionalIdAuthorizationFailedError

from api.kafka import errors
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.wire import Wire

AT_ONCE_S = 3.0  # the clients' own timeouts below are 10-20 s: refused well before them


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(tmp_path_factory.mktemp("txn") / "node").start()
    try:
        with Wire(s.kafka_port) as w:
            made = w.call((19, 7), topics=[dict(name="txn-idempotent", num_partitions=1, replication_factor=1,
                                                assignments=[], configs=[])], timeout_ms=10_000, validate_only=False)
            assert made.topics[0].error_code == errors.NONE, made
        yield s
    finally:
        s.stop()


def test_confluent_init_transactions_is_refused_at_once(server: KafkaServerProcess) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "tx-confluent"})
    start = time.monotonic()
    with pytest.raises(KafkaException) as refused:
        p.init_transactions(20)
    assert time.monotonic() - start < AT_ONCE_S
    err = refused.value.args[0]
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and err.fatal() and not err.retriable()
    assert "transactions are not supported by this server" in err.str(), err.str()
    # an idempotent producer is served
    delivered: list[KafkaError | None] = []
    idem = Producer({"bootstrap.servers": server.bootstrap, "enable.idempotence": True})
    idem.produce("txn-idempotent", b"v", on_delivery=lambda e, m: delivered.append(e))
    assert idem.flush(30) == 0 and delivered == [None]


def test_kafka_python_transactional_producer_is_refused_at_once(server: KafkaServerProcess) -> None:
    start = time.monotonic()
    p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tx-kafka-python", max_block_ms=20_000)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            p.init_transactions()
        assert time.monotonic() - start < AT_ONCE_S
    finally:
        p.close(timeout=5)


def test_aiokafka_transactional_producer_is_refused_at_once(server: KafkaServerProcess) -> None:
    async def run() -> float:
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tx-aiokafka",
                             request_timeout_ms=20_000)
        start = time.monotonic()
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await asyncio.wait_for(p.start(), 30)
            return time.monotonic() - start
        finally:
            await asyncio.wait_for(p.stop(), 10)

    assert asyncio.run(run()) < AT_ONCE_S


def test_the_transactional_requests_are_answered_with_the_refusal(server: KafkaServerProcess) -> None:
    with Wire(server.kafka_port) as w:
        for v in (1, 2, 3):
            found = w.call((10, v), key="tx-raw", key_type=1)
            assert found.error_code == errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, found
            if v >= 1:
                assert "not supported" in found.error_message
        unknown = w.call((10, 3), key="x", key_type=7)
        assert unknown.error_code == errors.INVALID_REQUEST
        for v in range(5):
            pid = w.call((22, v), transactional_id="tx-raw", transaction_timeout_ms=60_000, producer_id=-1,
                         producer_epoch=-1)
            assert (pid.error_code, pid.producer_id) == (errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1), pid
