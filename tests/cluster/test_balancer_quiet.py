"""The issue's quiet period: once the self-balancer has balanced a skewed load on three real nodes, it makes no
move (none back and forth) for 5 minutes of the same load. The cool-down is 30 s, so every partition, the moved
one too, may be moved again ten times over during those 5 minutes: only the balancer's own plan keeps it quiet.

Cheap in CPU for its length (it runs beside the other test files): the producer sends one round (ten messages to
the hot partition, one to each other) every 0.2 s rather than as fast as it can; the load's skew is the same."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC, Cluster, started_with_topic, wait_until
from tests.cluster.test_balancer import SkewedProducer, _auto_moves, _balanced, _leads

QUIET_S = 300.0
COOLDOWN_S = 30


@pytest.fixture
def steady(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"quiet-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--auto-balance-report-s", "1", "--auto-balance-sustain-s", "2", "--auto-balance-threshold", "0.3",
                "--auto-balance-cooldown-s", str(COOLDOWN_S))
    with started_with_topic(c, TOPIC, 6):
        yield c


@pytest.mark.slow(seconds=320)
def test_once_balanced_the_balancer_stays_quiet_for_5_minutes_of_steady_load(steady: Cluster) -> None:
    c = steady
    wait_until(lambda: len(_leads(c)) == 6, 30, "every partition led")
    producer = SkewedProducer(c, pace_s=0.2)
    producer.start()
    try:
        wait_until(lambda: _balanced(c), 120, "the hot partition's node left with it alone")
        moves = _auto_moves(c)
        assert len(moves) == 1, moves
        after = _leads(c)
        acked = producer.acked
        quiet_until = time.monotonic() + QUIET_S
        while time.monotonic() < quiet_until:  # no move at all: none back, none elsewhere
            assert _auto_moves(c) == moves and _leads(c) == after, (_auto_moves(c), _leads(c), after)
            time.sleep(2)
        assert producer.acked > acked + QUIET_S and producer.is_alive()  # the same load went on all along
        for node in range(3):  # the balancer could act all along: on, with the short cool-down, on every node
            config = httpx.get(f"{c.url(node)}/v1/config", timeout=10)
            assert config.status_code == 200, config.text
            assert {k: v for k, v in config.json()["broker"].items() if k.startswith("auto_balance")} == {
                "auto_balance": 1, "auto_balance_threshold": 0.3, "auto_balance_sustain_s": 2.0,
                "auto_balance_cooldown_s": COOLDOWN_S, "auto_balance_report_s": 1.0}, config.json()
    finally:
        producer.stop_flag.set()
        producer.join(30)
    assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
