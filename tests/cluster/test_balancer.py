"""The self-balancer on three real nodes: a skewed producer (one partition at ten times the others' bytes) is
rebalanced by load within a bounded time, the decision is listed with its reason in GET /v1/cluster/moves, and
then the balancer stays quiet (no move back and forth) while the load stays the same. Short settings: reports
every second, two seconds over the mean before a move."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC, Cluster, started_with_topic, wait_until

HOT = 0  # the partition that gets ten times the bytes
VALUE = "v" * 4000


@pytest.fixture
def balancing(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"balance-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--auto-balance-report-s", "1", "--auto-balance-sustain-s", "2", "--auto-balance-threshold", "0.3",
                "--auto-balance-cooldown-s", "600")
    with started_with_topic(c, TOPIC, 6):
        yield c


class SkewedProducer(threading.Thread):
    """Rounds of one request per partition to its leader (following 421s): ten messages to HOT, one to each other."""

    def __init__(self, c: Cluster, partitions: int = 6, pace_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.c = c
        self.partitions = partitions
        self.pace_s = pace_s  # seconds between rounds (0: as fast as it can): a long test's producer is cheap
        self.stop_flag = threading.Event()
        self.acked = 0
        self.statuses: dict[int, int] = {}

    def run(self) -> None:
        where = {p: self.c.url(0) for p in range(self.partitions)}
        with httpx.Client(timeout=30) as http:
            while not self.stop_flag.is_set():
                for p in range(self.partitions):
                    msgs = [{"key": f"k{p}-{i}", "value": VALUE, "partition": p} for i in range(10 if p == HOT else 1)]
                    for _ in range(20):
                        r = http.post(f"{where[p]}/v1/topics/{TOPIC}/messages", json={"messages": msgs})
                        self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
                        if r.status_code == 421:
                            where[p] = r.json()["leader_url"]
                            continue
                        if r.status_code == 200:
                            self.acked += len(msgs)
                            break
                        time.sleep(0.02)
                if self.pace_s:
                    self.stop_flag.wait(self.pace_s)


def _leads(c: Cluster) -> dict[int, int]:
    body = httpx.get(f"{c.url(0)}/v1/cluster/nodes", timeout=10).json()
    return {int(p.rsplit("-", 1)[1]): n["node_id"] for n in body["nodes"] for p in n["partitions"]}


def _auto_moves(c: Cluster) -> list[dict[str, Any]]:
    return [m for m in httpx.get(f"{c.url(1)}/v1/cluster/moves", timeout=10).json()["moves"] if m["kind"] == "auto"]


def _balanced(c: Cluster, partitions: int = 6) -> bool:
    lead = _leads(c)
    return len(lead) == partitions and sum(1 for n in lead.values() if n == lead[HOT]) == 1


def test_a_skewed_load_is_rebalanced_then_the_balancer_stays_quiet(balancing: Cluster) -> None:
    c = balancing
    lead = _leads(c)
    assert sum(1 for n in lead.values() if n == lead[HOT]) == 2  # spread two by two: the hot node has another one
    producer = SkewedProducer(c)
    producer.start()
    try:
        wait_until(lambda: _balanced(c), 90, "the hot partition's node left with it alone")
        moves = _auto_moves(c)
        assert len(moves) == 1, moves
        m = moves[0]
        assert m["from"] == lead[HOT] and m["partition"] != HOT and m["topic"] == TOPIC and m["by"] == 0
        assert "above the mean" in m["reason"] and m["loads"][str(lead[HOT])] > m["mean"]
        # steady load: no more moves, none back and forth (the hot node stays over the mean, but no move evens it)
        acked = producer.acked
        quiet_until = time.monotonic() + 20
        while time.monotonic() < quiet_until:
            assert len(_auto_moves(c)) == 1 and _balanced(c), _auto_moves(c)
            time.sleep(0.5)
        assert producer.acked > acked and producer.is_alive()  # the load went on all along
        # `mqindex rebalance` uses the same plan: nothing to do by load; by count it would even out the counts
        cli = [str(Path(sys.executable).parent / "mqindex"), "rebalance", "--url", c.url(2)]
        by_load = subprocess.run(cli, capture_output=True, text=True, timeout=120)
        assert by_load.returncode == 0 and "plan: 0 move(s)" in by_load.stderr, by_load.stderr
        by_count = subprocess.run([*cli, "--by", "count"], capture_output=True, text=True, timeout=120)
        assert by_count.returncode == 0 and "plan: 1 move(s)" in by_count.stderr, by_count.stderr
    finally:
        producer.stop_flag.set()
        producer.join(30)
    assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
