"""A lease renewal sent late (its thread starved, or the metadata database slow to answer) is logged with how long
since the last renewal and how long the renewal itself took, before the lease runs out: the log then tells why a
live node was failed over. One node's membership on a SQLite metadata database, on a clock the test moves."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cluster.membership import Membership
from broker.metadata.leases import LeaseTable

LEASE_MS = 60_000  # the heartbeat thread does not run during the test: the test renews


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def member(tmp_path: Path) -> Iterator[tuple[Membership, Clock]]:
    clock = Clock()
    m = Membership(LeaseTable(f"sqlite:///{tmp_path / 'meta.db'}"), 0, 0, None, None, lease_ms=LEASE_MS, clock=clock)
    m.start()
    try:
        yield m, clock
    finally:
        m.stop()


def _late(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "lease renewal late"]


def test_a_renewal_on_time_logs_nothing(member: tuple[Membership, Clock], caplog: pytest.LogCaptureFixture) -> None:
    m, clock = member
    with caplog.at_level("WARNING", logger="mqindex.broker.cluster"):
        clock.now += LEASE_MS / 3000
        m.heartbeat()
    assert _late(caplog) == []
    assert m.held_until == clock.now + LEASE_MS / 1000


def test_a_renewal_past_half_the_lease_is_logged(member: tuple[Membership, Clock],
                                                 caplog: pytest.LogCaptureFixture) -> None:
    m, clock = member
    with caplog.at_level("WARNING", logger="mqindex.broker.cluster"):
        clock.now += 40.0
        m.heartbeat()
    (late,) = _late(caplog)
    assert late.since_last_s == 40.0 and late.lease_s == 60.0 and late.node_id == 0  # type: ignore[attr-defined]
    assert not m.fenced and m.held_until == clock.now + 60.0


def test_a_slow_renewal_is_logged(member: tuple[Membership, Clock], caplog: pytest.LogCaptureFixture,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    m, clock = member
    renew = m.leases.heartbeat

    def slow(*args: object) -> bool:  # the database answers 25 s after the renewal was sent
        clock.now += 25.0
        return renew(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(m.leases, "heartbeat", slow)
    with caplog.at_level("WARNING", logger="mqindex.broker.cluster"):
        clock.now += 1.0
        m.heartbeat()
    (late,) = _late(caplog)
    assert late.renewal_s == 25.0 and late.since_last_s == 1.0  # type: ignore[attr-defined]
