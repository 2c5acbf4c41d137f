"""WalHolds (broker/streams/wal_holds.py) against a real metadata database (SQLite): a stream's WAL records are
let go once the metadata no longer needs them from here (the stream deleted, or committed past them); one held
for a failover's replay is also let go once that failover is over; one lent to a move is not."""

from __future__ import annotations

from pathlib import Path

from broker.metadata import MetadataClient
from broker.streams.wal_holds import WalHolds


def test_holds_are_let_go_when_deleted_or_when_the_replay_is_over(tmp_path: Path) -> None:
    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 1)
    try:
        meta.register_node()
        held, lent, gone = meta.create_streams(3)
        meta.catch_up()
        holds = WalHolds(meta)
        replaying = [True]
        holds.replay_pending = lambda: replaying[0]
        holds.hold_for_replay({held: 5})
        holds.lend({lent: 3, gone: 7})
        assert holds.ids() == {held, lent, gone}
        assert holds.due() == {}  # nothing committed past them, the replay under way
        assert meta.delete_streams([gone]) == [gone]
        meta.catch_up()
        assert holds.due() == {gone: 7}
        replaying[0] = False  # the failover finished without committing `held`: no one will replay it
        assert holds.due() == {held: 5}
        assert holds.ids() == {lent}
        assert holds.due() == {}  # a move's next owner still reads `lent` from here
    finally:
        meta.close()
