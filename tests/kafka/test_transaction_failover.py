"""A partition failed over in the middle of a transaction: three nodes with the shared WAL, the leader of one of
the transaction's partitions killed with kill -9 before the commit. The survivor that takes the partition over
(from the shared WAL) has the transaction open (its last stable offset stops at the transaction's first record);
the coordinator then writes the commit marker there, and a read_committed consumer reads exactly the
transaction's records."""

from __future__ import annotations

import signal
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from api.kafka import errors
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess, kafka_nodes
from tests.kafka.test_transactions_cluster import (
    PARTS,
    TOPIC,
    bootstrap,
    latest,
    leaders,
    list_latest,
    read_all,
    stable,
)


@pytest.fixture
def shared_wal_nodes(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]
                     ) -> Iterator[list[KafkaServerProcess]]:
    prefix = f"txf-{uuid.uuid4().hex[:8]}"
    store, wal, meta = seaweedfs.store_url("mqindex", prefix), seaweedfs.store_url("mqindex", prefix + "-wal"), pg_url()
    with kafka_nodes(tmp_path, PARTS, {TOPIC: PARTS}, "--store", store, "--wal", wal, "--metadata", meta,
                     "--lease-ms", "3000") as made:
        yield made


@pytest.mark.slow(seconds=30)  # three nodes, a lease to expire and a failover from the shared WAL
def test_a_partition_failed_over_in_the_middle_of_a_transaction_keeps_it_open_and_gets_its_marker(
        shared_wal_nodes: list[KafkaServerProcess]) -> None:
    nodes = shared_wal_nodes
    lead = leaders(nodes)
    moved = next(q for q, n in lead.items() if n != 0)
    victim = lead[moved]
    survivors = sorted(n for n in range(PARTS) if n != victim)
    # a transactional id node 0 coordinates with all three nodes alive and with the two survivors
    tid = next(t for t in (f"txf-{i}" for i in range(10_000))
               if zlib.crc32(t.encode()) % PARTS == 0 and survivors[zlib.crc32(t.encode()) % 2] == 0)
    p = Producer({"bootstrap.servers": bootstrap(nodes), "transactional.id": tid})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        for part in range(PARTS):
            for i in range(2):
                p.produce(TOPIC, key=f"fail-{part}-{i}".encode(), value=b"f", partition=part)
        assert p.flush(30) == 0

        nodes[victim].stop(signal.SIGKILL)

        def taken_over() -> bool:
            try:
                return leaders(nodes)[moved] in survivors and latest(nodes, moved, 0) == 2
            except (AssertionError, OSError):
                return False

        wait_for("a survivor serving the partition", taken_over, timeout=90, interval=0.5)
        # the last stable offset, asked of the partition's leader again as a client does after
        # NOT_LEADER_OR_FOLLOWER: the survivor that failed the partition over may hand it on to the other one
        # (the survivors' partitions evened out) between the two questions
        lso: list[int] = []

        def answered() -> bool:
            try:
                got = list_latest(nodes, moved, 1)
            except OSError:
                return False
            if got.error_code == errors.NOT_LEADER_OR_FOLLOWER:
                return False
            assert got.error_code == errors.NONE, got
            lso.append(int(got.offset))
            return True

        wait_for("the partition's leader answers its last stable offset", answered, timeout=30, interval=0.2)
        assert lso == [0]  # the transaction is still open there: nothing of it is stable
        p.commit_transaction(90)
        # two records and the commit marker on each partition: the markers are durable when the commit returns,
        # but a survivor that has just taken the partition over may not answer ListOffsets yet (stable() is False
        # meanwhile)
        wait_for("every partition stable after its marker", lambda: stable(nodes, {q: 3 for q in range(PARTS)}),
                 timeout=30, interval=0.5)
        got = read_all(nodes, "read_committed", 6)
        assert sorted(got) == sorted(f"fail-{q}-{i}".encode() for q in range(PARTS) for i in range(2))
    finally:
        p.purge()
        p.close()
