"""WalHolds (broker/streams/wal_holds.py) against a real metadata database (SQLite): a stream's WAL records are
let go once the metadata no longer needs them from here (the stream deleted, or committed past them); those held
for a failover's replay are also let go once that failover is over, by their own WAL slots (not by the stream's
offsets, which this node's own later appends may reach); a stream lent to a move is not, even one first held for
the replay."""

from __future__ import annotations

from pathlib import Path

from broker.metadata import MetadataClient
from broker.streams.wal_holds import EVERY_STREAM, WalHolds, replays
from broker.streams.wal_trim import WalSlot, WalTrimTracker


def test_holds_are_let_go_when_deleted_or_when_the_replay_is_over(tmp_path: Path) -> None:
    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 1)
    try:
        meta.register_node()
        held, lent, gone, moved = meta.create_streams(4)
        meta.catch_up()
        holds = WalHolds(meta)
        replaying: list[frozenset[int] | None] = [frozenset({held, moved})]
        holds.replay_pending = lambda: replaying[0]
        tracker = WalTrimTracker()
        slots = [WalSlot(held, 2, 10, wal_start=0), WalSlot(held, 5, 20, wal_start=10),
                 WalSlot(moved, 4, 30, wal_start=20)]
        for s in slots:
            tracker.add(s)
        holds.hold_for_replay({held: slots[:2], moved: slots[2:]})
        holds.lend({lent: 3, gone: 7, moved: 4})  # a move of `moved` reads it from here now
        assert holds.ids() == {held, lent, gone, moved} and holds.lent_ids() == {lent, gone, moved}
        assert holds.due() == ({}, [])  # nothing committed past them, the replay under way
        assert meta.delete_streams([gone]) == [gone]
        meta.catch_up()
        assert holds.due() == ({gone: 7}, [])
        replaying[0] = None  # the failover finished without committing `held`: no one will replay it
        done, released = holds.due()
        assert done == {} and released == slots[:2]
        assert holds.ids() == {lent, moved}  # a move's next owner still reads them from here
        assert holds.due() == ({}, [])
        tracker.release(released)
        assert tracker.trim_point() == 20  # the released records go; `moved`'s still holds the WAL
    finally:
        meta.close()


def test_a_replay_recorded_by_an_earlier_release_takes_every_stream() -> None:
    assert replays(EVERY_STREAM, 7) and replays(frozenset({7}), 7) and not replays(frozenset({8}), 7)
