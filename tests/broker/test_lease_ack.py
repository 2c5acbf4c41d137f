"""A node that cannot renew its lease (the metadata database does not answer) stops acknowledging before its
lease can have expired, so the other nodes never take its partitions over while it still writes them; once a
renewal succeeds again it acknowledges again."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.config import Settings
from broker.errors import LeaseLapsed, NotOwner
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage

LEASE_MS = 1500


@pytest.fixture
def node(tmp_path: Path) -> Iterator[BrokerNode]:
    s = Settings(data_dir=str(tmp_path / "data")).resolved()
    n = BrokerNode.open(s.data_dir, s.store, s.metadata, lease_ms=LEASE_MS)
    n.create_topic("t", 1)
    yield n
    n.close()


def test_no_acknowledgement_without_the_lease(node: BrokerNode, monkeypatch: pytest.MonkeyPatch) -> None:
    membership = node.cluster.membership
    assert node.produce("t", [InMessage(b"before")])[0].offset == 0
    renew = membership.leases.heartbeat
    cut_off = time.monotonic()

    def unreachable(*args: object, **kw: object) -> bool:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(membership.leases, "heartbeat", unreachable)
    deadline = time.monotonic() + 30
    while True:  # until the node refuses: at the latest one lease after the last renewal that went through
        try:
            node.produce("t", [InMessage(b"while cut off")])
        except NotOwner as exc:
            assert "could not renew its lease" in str(exc)
            break
        assert time.monotonic() < deadline, "still acknowledging 30 s after the metadata stopped answering"
        time.sleep(0.05)
    assert time.monotonic() - cut_off <= LEASE_MS / 1000 + 1.0  # refused within about a lease
    with pytest.raises(NotOwner):
        node.produce("t", [InMessage(b"refused")])
    monkeypatch.setattr(membership.leases, "heartbeat", renew)
    deadline = time.monotonic() + 30
    while True:  # the next renewal lets it acknowledge again
        try:
            node.produce("t", [InMessage(b"after")])
            break
        except NotOwner:
            assert time.monotonic() < deadline, "not acknowledging 30 s after the metadata answered again"
            time.sleep(0.05)


def test_a_lease_that_lapses_while_a_produce_is_written_is_refused_saying_its_messages_may_be_kept(
        node: BrokerNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease is checked before the append and again before the answer; when it lapsed in between, the records
    are in the WAL: the refusal says they are not acknowledged but may be kept, and they are, once this node
    renews its lease (no other node took the partition over)."""
    membership = node.cluster.membership
    renew = membership.leases.heartbeat
    checks = 0

    def unreachable(*args: object, **kw: object) -> bool:
        raise sqlite3.OperationalError("unable to open database file")

    def lapses_during_the_write() -> None:
        nonlocal checks
        checks += 1
        if checks == 2:  # after the append: the lease ran out while the records were written (no renewal now)
            monkeypatch.setattr(membership.leases, "heartbeat", unreachable)
            membership.held_until = membership.clock() - 0.001
        membership.check_lease()

    before = list(node.storage.ack_checks)
    node.storage.ack_checks[:] = [lapses_during_the_write if c == membership.check_lease else c for c in before]
    try:
        with pytest.raises(LeaseLapsed) as refused:
            node.produce("t", [InMessage(b"written, not acknowledged", key=b"w")])
    finally:
        node.storage.ack_checks[:] = before
        monkeypatch.setattr(membership.leases, "heartbeat", renew)
    assert checks == 2
    assert "written before it lapsed and are not acknowledged" in str(refused.value)
    assert "may or may not be kept" in str(refused.value) and "a retry may store them twice" in str(refused.value)
    deadline = time.monotonic() + 30
    while True:  # the next renewal: acknowledged again, and the refused message is there before the new one
        try:
            node.produce("t", [InMessage(b"after", key=b"a")])
            break
        except NotOwner:
            assert time.monotonic() < deadline, "not acknowledging 30 s after the lease lapsed"
            time.sleep(0.05)
    messages, _ = node.fetch("t", 0, 0, 10)
    assert [m.value for m in messages] == [b"written, not acknowledged", b"after"]
