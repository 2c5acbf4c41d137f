"""A closed node leaves none of its Kafka listener's helper threads running: the transaction coordinator's
completion pool (`txn-complete`, made by the first EndTxn) and the produce answers' metadata catch-up thread
(`fresh-metadata`, made by the first Produce) stop within the node's close, after a real transactional producer
(confluent-kafka) committed through them. The node runs in the test's process (tests/cluster/conftest.py) so
that its threads can be looked at; the Kafka listener is the real one, on a free port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from api.kafka import KafkaServer
from tests.cluster.conftest import InProcessNodes

HELPERS = ("txn-complete", "fresh-metadata")


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[InProcessNodes]:
    made = InProcessNodes(tmp_path)
    try:
        yield made
    finally:
        made.close()


def helpers() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.is_alive() and t.name.startswith(HELPERS))


def test_a_closed_node_leaves_no_transaction_completion_nor_produce_answer_thread(in_process: InProcessNodes
                                                                                  ) -> None:
    assert helpers() == [], "another test left these threads"
    node = in_process.open(0)
    node.create_topic("closing", 2)
    listener = KafkaServer(node, "127.0.0.1", 0)
    listener.start()
    try:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{listener.port}", "transactional.id": "closing-node",
                      "linger.ms": 0})
        p.init_transactions(30)
        for i in range(3):
            p.begin_transaction()
            for part in (0, 1):
                p.produce("closing", f"v{i}".encode(), key=f"k{i}".encode(), partition=part)
            p.commit_transaction(30)
        p.flush(10)
        made = helpers()
        assert any(n.startswith("txn-complete") for n in made), made
        assert any(n.startswith("fresh-metadata") for n in made), made
    finally:
        listener.stop()
    t0 = time.monotonic()
    node.close()
    assert time.monotonic() - t0 < 60
    assert helpers() == []
