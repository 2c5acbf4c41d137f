"""Which WAL prefix may be trimmed: a record holds the trim point back until its stream's committed end covers
it, or until this node gives the stream up. Giving a stream up releases the records appended for it so far,
not the stream for good: once the stream is opened here again (a reassignment, a rebalance, a failover back),
its new records hold the trim point until they are committed, so a crash before their upload loses nothing."""

from __future__ import annotations

from broker.streams.wal_trim import WalSlot, WalTrimTracker


def test_records_hold_the_trim_point_until_committed() -> None:
    t = WalTrimTracker()
    t.committed({1: 0, 2: 0})
    for sid, last, wal_next in [(1, 10, 100), (2, 5, 200), (1, 20, 300)]:
        t.add(WalSlot(sid, last, wal_next))
    assert t.trim_point() is None
    t.committed({1: 20})
    assert t.trim_point() == 100  # stream 2's record at WAL 100-200 is not committed yet
    t.committed({2: 5})
    assert t.trim_point() == 300
    assert len(t) == 0


def test_a_record_not_yet_durable_holds_the_trim_point() -> None:
    t = WalTrimTracker()
    pending = WalSlot(1, 10)
    t.add(pending)
    t.add(WalSlot(1, 20, 300))
    t.committed({1: 20})
    assert t.trim_point() is None
    pending.wal_next = 150
    assert t.trim_point() == 300


def test_a_stream_given_up_releases_its_records_then() -> None:
    t = WalTrimTracker()
    t.add(WalSlot(7, 100, 1000))
    t.add(WalSlot(8, 50, 1500))
    t.forget_stream(7)
    assert t.trim_point() == 1000  # stream 8's record is not committed
    t.committed({8: 50})
    assert t.trim_point() == 1500


def test_a_stream_opened_here_again_holds_the_trim_point_with_its_new_records() -> None:
    t = WalTrimTracker()
    t.add(WalSlot(7, 100, 1000))
    t.forget_stream(7)  # moved to another node
    assert t.trim_point() == 1000
    t.committed({7: 100})  # back on this node, opened at its committed end
    t.add(WalSlot(7, 110, 2000))
    assert t.trim_point() is None, "a record of the stream opened again was trimmed before its upload"
    t.committed({7: 110})
    assert t.trim_point() == 2000
