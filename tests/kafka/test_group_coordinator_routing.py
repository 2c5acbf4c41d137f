"""Two `mqindex serve` nodes with Kafka listeners on one PostgreSQL metadata database and one SeaweedFS bucket:
every group API sent to the node that does not coordinate the group (FindCoordinator names the other) is
answered NOT_COORDINATOR, as Kafka answers it, so that clients look the coordinator up again instead of two
nodes each running a group of that name (and taking commits for it); the coordinator answers them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from api.kafka import errors
from storage_tier.seaweedfs_server import SeaweedFS
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.wire import Wire

FIND_COORDINATOR, METADATA = (10, 3), (3, 1)
T = "routing-topic"


@pytest.fixture
def two_nodes(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[list[KafkaServerProcess]]:
    store, meta = seaweedfs.store_url("mqindex", f"coord-{uuid.uuid4().hex[:8]}"), pg_url()
    nodes: list[KafkaServerProcess] = []
    try:
        for i in range(2):
            node = KafkaServerProcess(tmp_path / f"node{i}", "--store", store, "--metadata", meta, "--node-id", str(i),
                                      "--lease-ms", "3000")
            nodes.append(node)
            node.start()
        yield nodes
    finally:
        for node in nodes:
            if node.proc is not None:
                node.stop()


def coordinator(w: Wire, group: str) -> int:
    resp = w.call(FIND_COORDINATOR, key=group, key_type=0)
    assert resp.error_code == errors.NONE
    return int(resp.node_id)


def test_group_requests_to_the_other_node_answer_not_coordinator(two_nodes: list[KafkaServerProcess]) -> None:
    with Wire(two_nodes[0].kafka_port) as w0, Wire(two_nodes[1].kafka_port) as w1:
        deadline = time.monotonic() + 30
        while not all(len(w.call(METADATA, topics=[]).brokers) == 2 for w in (w0, w1)):
            assert time.monotonic() < deadline, "the two nodes do not see each other"
            time.sleep(0.1)
        # a group node 1 coordinates (both nodes say so)
        group = next(g for g in (f"routed-{i}" for i in range(100)) if coordinator(w0, g) == 1)
        assert coordinator(w1, group) == 1

        # node 0 answers every group API with NOT_COORDINATOR, and keeps nothing
        assert w0.join(group).error_code == errors.NOT_COORDINATOR
        assert w0.sync(group, 1, "m", {"m": b"x"}).error_code == errors.NOT_COORDINATOR
        assert w0.heartbeat(group, 1, "m") == errors.NOT_COORDINATOR
        left = w0.leave(group, "m")
        assert left.error_code == errors.NOT_COORDINATOR and left.members == []
        assert w0.commit(group, -1, "", {(T, 0): 5, (T, 1): 6}) == [errors.NOT_COORDINATOR] * 2
        fetched = w0.committed(group, T, [0])
        assert fetched.error_code == errors.NOT_COORDINATOR
        v1 = w0.call((9, 1), group_id=group, topics=[dict(name=T, partition_indexes=[0])])  # no top-level code
        assert [p.error_code for t in v1.topics for p in t.partitions] == [errors.NOT_COORDINATOR]

        # the coordinator runs the group and keeps its offsets
        j = w1.join(group)
        assert j.error_code == errors.NONE
        assert w1.sync(group, j.generation_id, j.member_id, {j.member_id: b"x"}).error_code == errors.NONE
        assert w1.heartbeat(group, j.generation_id, j.member_id) == errors.NONE
        assert w1.commit(group, j.generation_id, j.member_id, {(T, 0): 7}) == [errors.NONE]
        got = w1.committed(group, T, [0])
        assert got.error_code == errors.NONE and got.topics[0].partitions[0].committed_offset == 7
        assert w0.heartbeat(group, j.generation_id, j.member_id) == errors.NOT_COORDINATOR  # not a member there
        assert w1.leave(group, j.member_id).members[0].error_code == errors.NONE
