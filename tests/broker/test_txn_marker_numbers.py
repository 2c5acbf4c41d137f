"""Numbered transaction markers (broker/partitions/kafka_clients/txn_partition.py): a marker carries the
coordinator's number of the transaction it ends, and a partition that has a durable marker of that number (or a
later one) of the producer does not take it again. So a coordinator that writes a decided transaction's markers
a second time (after its kill -9, not knowing which were durable) cannot close the producer's next transaction
begun on that partition meanwhile; the numbers are read back from the stored markers after a restart.

The node, its WAL and its stream storage are real."""

from __future__ import annotations

from broker.node import BrokerNode
from broker.partitions.kafka_clients import txn_partition
from broker.partitions.records import batch_slices
from tests.broker.test_txn_marker_failure import PRODUCER, transactional


def _markers(node: BrokerNode, end: int) -> list[tuple[int, int, int]]:
    """(offset, type, number) of every marker stored in the partition."""
    parts = node.partitions
    part = parts.partition(parts.topic("t"), 0)
    out = []
    for rec in parts.storage.read(part.data_stream, 0, end, 1 << 20):
        for _at, h, raw in batch_slices(rec.payload):
            if h.attributes & txn_partition.CONTROL:
                kind, seq = txn_partition.marker_info(raw, h)
                out.append((h.base_offset, kind, seq))
    return out


def test_a_marker_written_again_does_not_close_the_producers_next_transaction(local_node: BrokerNode) -> None:
    local_node.create_topic("t", 1)
    cb, parts = local_node.client_batches, local_node.partitions
    part = parts.partition(parts.topic("t"), 0)
    cb.append(part, transactional(0, b"a0", b"a1"))[1].wait()  # transaction 1: offsets 0-1
    cb.append_marker(part, PRODUCER, 0, commit=True, seq=1).result(30)  # offset 2
    cb.append(part, transactional(2, b"b0"))[1].wait()  # transaction 2 begins at offset 3
    state = cb.txns.of(part)
    assert state.open == {PRODUCER: 3} and state.lso(4) == 3

    cb.append_marker(part, PRODUCER, 0, commit=True, seq=1).result(30)  # transaction 1's marker again
    assert state.open == {PRODUCER: 3} and state.lso(4) == 3  # transaction 2 still open
    assert part.data is not None and part.data.next_offset == 4  # nothing written
    assert not txn_partition.visible(parts, part, 3)

    cb.append_marker(part, PRODUCER, 0, commit=False, seq=2).result(30)  # transaction 2 aborted: offset 4
    assert state.open == {} and state.aborted_in(0, 5) == [(PRODUCER, 3)] and state.lso(5) == 5
    assert _markers(local_node, 5) == [(2, txn_partition.COMMIT, 1), (4, txn_partition.ABORT, 2)]

    cb.txns.forget(part)  # rebuilt from the stored batches, as after a restart: the numbers are read back
    rebuilt = cb.txns.of(part)
    assert rebuilt.marked == {PRODUCER: 2} and rebuilt.open == {}
    cb.append(part, transactional(3, b"c0"))[1].wait()  # transaction 3 begins at offset 5
    for seq in (1, 2):
        cb.append_marker(part, PRODUCER, 0, commit=True, seq=seq).result(30)
    assert rebuilt.open == {PRODUCER: 5} and part.data.next_offset == 6
    assert not txn_partition.visible(parts, part, 5)
    cb.append_marker(part, PRODUCER, 0, commit=True, seq=3).result(30)
    assert rebuilt.open == {} and txn_partition.visible(parts, part, 5)


def test_unnumbered_markers_are_always_written(local_node: BrokerNode) -> None:
    local_node.create_topic("t", 1)
    cb, parts = local_node.client_batches, local_node.partitions
    part = parts.partition(parts.topic("t"), 0)
    cb.append(part, transactional(0, b"a0"))[1].wait()
    cb.append_marker(part, PRODUCER, 0, commit=True).result(30)
    cb.append_marker(part, PRODUCER, 0, commit=True).result(30)
    assert _markers(local_node, 3) == [(1, txn_partition.COMMIT, 0), (2, txn_partition.COMMIT, 0)]
