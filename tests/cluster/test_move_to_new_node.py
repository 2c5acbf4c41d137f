"""A move to a node that has just joined lends it the range of the shared WAL the partition holds unuploaded, as a
move to any other node does. The source learns what a target reads from the target's lease row; it read the rows
at its renewals only (a fifth of a lease apart), so for up to that long after a node joined, moves to it uploaded
everything first (the scale-out case: a node added, partitions moved onto it at once)."""

from __future__ import annotations

from broker.cluster import handoff_wal
from broker.partitions.client_messages import InMessage
from tests.cluster.conftest import InProcessNodes
from tests.cluster.harness import wait_until

LEASE_MS = 60_000  # renewals 12 s apart


def test_a_move_to_a_node_that_has_just_joined_lends_the_unuploaded_range(nodes: InProcessNodes) -> None:
    source = nodes.open(0, lease_ms=LEASE_MS, shared_wal=True)
    source.create_topic("t", 1)
    values = [b"m%03d-" % i + b"x" * 1000 for i in range(100)]
    source.produce("t", [InMessage(v) for v in values])
    p = source.partitions.partition(source.partitions.topic("t"), 0)
    data_stream = p.data_stream
    assert source.meta.get_stream(data_stream).end_offset == 0  # all of it in the source's WAL only

    target = nodes.open(1, lease_ms=LEASE_MS, shared_wal=True)
    answer = source.reassign("t", 0, 1)  # at once
    assert answer["to"] == 1 and not answer["unchanged"]
    wait_until(lambda: target.partition_info("t", 0)["owned"], 30, "the new node serves the moved partition")
    docs = handoff_wal.docs(target.meta, refresh=True)
    assert [d["source"] for d in docs.values()] == [0], docs  # lent, not uploaded first
    assert target.meta.get_stream(data_stream).end_offset == 0
    assert [m.value for m in target.fetch("t", 0, 0, 200)[0]] == values
