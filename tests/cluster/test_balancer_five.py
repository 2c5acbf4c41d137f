"""The self-balancer on five real nodes (the issue's size): ten partitions two by two, one produced to at ten
times the others' bytes. The balancer takes the hot node's other partition to a light node, once, and then stays
quiet under the same load (the hot partition alone on its node is as even as the load gets). Short settings:
reports every second, two seconds over the mean before a move."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC, Cluster, wait_until
from tests.cluster.test_balancer import HOT, SkewedProducer, _auto_moves, _balanced, _leads

NODES, PARTITIONS = 5, 10


@pytest.fixture
def five(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"balance5-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--auto-balance-report-s", "1", "--auto-balance-sustain-s", "2", "--auto-balance-threshold", "0.3",
                "--auto-balance-cooldown-s", "600")
    try:
        for i in range(NODES):
            c.start(i)
        r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=60)
        assert r.status_code == 201, r.text
        yield c
    finally:
        c.stop_all()


@pytest.mark.slow(seconds=35)
def test_five_nodes_a_skewed_load_is_rebalanced_once_then_quiet(five: Cluster) -> None:
    c = five
    wait_until(lambda: len(_leads(c)) == PARTITIONS, 30, "every partition led")
    lead = _leads(c)
    assert sorted(list(lead.values()).count(n) for n in range(NODES)) == [2] * NODES  # two by two
    producer = SkewedProducer(c, PARTITIONS)
    producer.start()
    try:
        wait_until(lambda: _balanced(c, PARTITIONS), 90, "the hot partition's node left with it alone")
        moves = _auto_moves(c)
        assert len(moves) == 1, moves
        m = moves[0]
        assert m["from"] == lead[HOT] and m["partition"] != HOT and m["by"] == 0
        assert "above the mean" in m["reason"] and set(m["loads"]) == {str(n) for n in range(NODES)}
        after = _leads(c)
        assert sorted(list(after.values()).count(n) for n in range(NODES)) == [1, 2, 2, 2, 3]
        acked = producer.acked
        quiet_until = time.monotonic() + 20
        while time.monotonic() < quiet_until:  # no move back and forth under the same load
            assert len(_auto_moves(c)) == 1 and _leads(c) == after, _auto_moves(c)
            time.sleep(0.5)
        assert producer.acked > acked and producer.is_alive()
    finally:
        producer.stop_flag.set()
        producer.join(30)
    assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
