"""The issue's quiet period: once the self-balancer has balanced a skewed load on three real nodes, it makes no
move (none back and forth) for the issue's 5 minutes of the same load, run on a clock five times faster.

The balancer's decisions are driven by its own settings, not by wall time: it reports and decides every
`auto_balance_report_s`, acts on a node overloaded for `auto_balance_sustain_s`, and leaves a partition moved in
the last `auto_balance_cooldown_s` alone. Five minutes at a report every 1 s and a cool-down of 30 s are 300
decisions during which every partition, the moved one too, may be moved again ten times over. Here every one of
those times and the producer's pace are divided by five (a report every 0.2 s, sustain 0.4 s, cool-down 6 s, a
round every 0.04 s, 60 s of quiet): the same 300 decisions, the same ten cool-downs, the same rounds of load in
each report, the same skew. Only the balancer's own plan keeps it quiet.

Cheap in CPU for its length (it runs beside the other test files): the producer sends one round (ten messages to
the hot partition, one to each other) every 0.04 s rather than as fast as it can."""

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

SCALE = 5  # the 5 minutes of quiet, at a report every 1 s and a 30 s cool-down, on a clock this much faster
QUIET_S = 300.0 / SCALE
REPORT_S = 1.0 / SCALE
SUSTAIN_S = 2.0 / SCALE
COOLDOWN_S = 30.0 / SCALE
PACE_S = 0.2 / SCALE


@pytest.fixture
def steady(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"quiet-{uuid.uuid4().hex[:8]}"), pg_url(),
                "--auto-balance-report-s", str(REPORT_S), "--auto-balance-sustain-s", str(SUSTAIN_S),
                "--auto-balance-threshold", "0.3", "--auto-balance-cooldown-s", str(COOLDOWN_S))
    with started_with_topic(c, TOPIC, 6):
        yield c


@pytest.mark.slow(seconds=80)
def test_once_balanced_the_balancer_stays_quiet_for_5_scaled_minutes_of_steady_load(steady: Cluster) -> None:
    c = steady
    wait_until(lambda: len(_leads(c)) == 6, 30, "every partition led")
    producer = SkewedProducer(c, pace_s=PACE_S)
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
            time.sleep(2 / SCALE)
        # the same load went on all along: a round (15 messages) a second at the least
        assert producer.acked > acked + 15 * QUIET_S and producer.is_alive(), (producer.acked, acked)
        for node in range(3):  # the balancer could act all along: on, with the short cool-down, on every node
            config = httpx.get(f"{c.url(node)}/v1/config", timeout=10)
            assert config.status_code == 200, config.text
            assert {k: v for k, v in config.json()["broker"].items() if k.startswith("auto_balance")} == {
                "auto_balance": 1, "auto_balance_threshold": 0.3, "auto_balance_sustain_s": SUSTAIN_S,
                "auto_balance_cooldown_s": COOLDOWN_S, "auto_balance_report_s": REPORT_S}, config.json()
    finally:
        producer.stop_flag.set()
        producer.join(30)
    assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
