"""A partition's transaction state (open transactions, aborted ones, the last stable offset) follows only what is
durable: a commit or abort marker whose WAL append fails leaves the transaction open, as the stored partition
has it, and the coordinator's next try closes it; a transactional batch whose append fails is not counted as an
open transaction at offsets that went back.

The node, its WAL and its stream storage are real; the fault is injected at the WAL writer's fdatasync (failed
once with ENOSPC, as a full disk answers)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import crc32c
import pytest

from broker.errors import OutOfDisk
from broker.node import BrokerNode
from broker.partitions.kafka_clients import txn_partition
from broker.partitions.records import ProducerRecord, build_batch
from broker.streams import wal as wal_module
from tests.broker.test_client_batches_in_line import idempotent
from tests.broker.test_idempotent_retry import WalFsyncGate, wait_until

PRODUCER = 77


@pytest.fixture
def fsync_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[WalFsyncGate]:
    g = WalFsyncGate()
    monkeypatch.setattr(wal_module.os, "fdatasync", g)
    yield g
    g.release()


@pytest.fixture
def node(local_node: BrokerNode, fsync_gate: WalFsyncGate) -> Iterator[BrokerNode]:
    local_node.create_topic("t", 1)
    yield local_node
    fsync_gate.release()


def transactional(sequence: int, *values: bytes) -> bytes:
    b = bytearray(idempotent(build_batch([ProducerRecord(v, v, [], 1) for v in values]), PRODUCER, 0, sequence))
    struct.pack_into(">h", b, 21, struct.unpack_from(">h", b, 21)[0] | txn_partition.TRANSACTIONAL)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def test_a_failed_marker_leaves_the_transaction_open_and_the_next_one_closes_it(node: BrokerNode,
                                                                              fsync_gate: WalFsyncGate) -> None:
    cb, parts = node.client_batches, node.partitions
    part = parts.partition(parts.topic("t"), 0)
    cb.append(part, transactional(0, b"a0", b"a1"))[1].wait()
    state = cb.txns.of(part)
    assert state.open == {PRODUCER: 0} and state.lso(2) == 0

    fsync_gate.fail_next()
    with pytest.raises(OutOfDisk):
        cb.append_marker(part, PRODUCER, 0, commit=False).result(30)
    state = cb.txns.of(part)
    assert state.open == {PRODUCER: 0} and state.aborted == [] and state.lso(2) == 0
    assert not txn_partition.visible(parts, part, 0)  # no marker stored: still open, not shown

    wait_until(lambda: node.storage.disk.episode is None, "the out-of-disk episode ended")
    cb.append_marker(part, PRODUCER, 0, commit=False).result(30)
    state = cb.txns.of(part)
    assert state.open == {} and state.aborted == [(2, PRODUCER, 0)] and state.lso(3) == 3
    assert state.aborted_in(0, 3) == [(PRODUCER, 0)]
    assert not txn_partition.visible(parts, part, 1)


def test_a_failed_transactional_batch_opens_no_transaction_at_offsets_that_went_back(
        node: BrokerNode, fsync_gate: WalFsyncGate) -> None:
    cb, parts = node.client_batches, node.partitions
    part = parts.partition(parts.topic("t"), 0)
    cb.append(part, build_batch([ProducerRecord(b"plain", b"p", [], 1)]))[1].wait()
    fsync_gate.fail_next()
    with pytest.raises(OutOfDisk):
        cb.append(part, transactional(0, b"a0", b"a1"))[1].wait()
    wait_until(lambda: node.storage.disk.episode is None, "the out-of-disk episode ended")
    assert cb.txns.of(part).open == {} and cb.txns.of(part).lso(1) == 1

    results, queued = cb.append(part, transactional(0, b"a0", b"a1"))  # the producer's retry
    queued.wait()
    assert results[0].base_offset == 1
    assert cb.txns.of(part).open == {PRODUCER: 1}
    cb.append_marker(part, PRODUCER, 0, commit=True).result(30)
    assert cb.txns.of(part).open == {} and cb.txns.of(part).aborted == []
    assert txn_partition.visible(parts, part, 2)
