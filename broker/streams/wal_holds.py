"""WalHolds: the streams not open here whose records this node's shared WAL must keep for another node.

- Lent (`lend`): a stream moved away without uploading first (broker/cluster/handoff.py). Its next owner reads
  its last records from this WAL (broker/streams/moved_range.py).
- Held for a replay (`hold_for_replay`): after a restart, a stream that another node's failover of this node's
  previous incarnation took, with records acknowledged by that incarnation and not committed yet. That failover
  has recorded its replay of this WAL and not finished it (a replay that failed and is retried): letting them go
  at this node's first upload left the survivor nothing to replay, and it served the partition without them.

Either is kept until the metadata shows the stream committed up to its end here, or deleted (`due`). One held for
a replay is also let go once that failover is over: it committed all it read, so a record still not committed
is one it will never replay (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.metadata import MetadataClient

log = logging.getLogger("mqindex.broker.streams")


class WalHolds:
    def __init__(self, meta: MetadataClient) -> None:
        self.meta = meta
        self._ends: dict[int, int] = {}  # stream id -> the end offset its WAL records reach here
        self._for_replay: set[int] = set()  # those held for a replay
        #: whether another node's failover of this node's previous incarnation is replaying this WAL (set by the
        #: node with a shared WAL; None: never)
        self.replay_pending: Callable[[], bool] | None = None

    def __contains__(self, sid: int) -> bool:
        return sid in self._ends

    def __len__(self) -> int:
        return len(self._ends)

    def ids(self) -> set[int]:
        return set(self._ends)

    def committed_end(self, sid: int) -> int:
        """The stream's committed end in the metadata (one the metadata does not know, deleted with its topic:
        none of its records is kept)."""
        s = self.meta.image.streams.get(sid)
        return 1 << 62 if s is None else s.end_offset

    def lend(self, ends: dict[int, int]) -> None:
        for sid, end in ends.items():
            self._ends[sid] = max(end, self._ends.get(sid, end))

    def hold_for_replay(self, ends: dict[int, int]) -> None:
        if ends:
            log.info("WAL records of streams a failover of this node is replaying elsewhere are kept until it "
                     "commits them", extra={"streams": sorted(ends)})
        self.lend(ends)
        self._for_replay |= ends.keys()

    def due(self) -> dict[int, int]:
        """The holds to let go now (stream id -> end), dropped from here."""
        done: dict[int, int] = {}
        for sid, end in list(self._ends.items()):
            if self.committed_end(sid) >= end:
                done[sid] = end
        waiting = self._for_replay - done.keys()
        if waiting and self.replay_pending is not None and not self.replay_pending():
            log.error("acknowledged WAL records of a stream this node does not own were not replayed by its "
                      "failover", extra={"streams": sorted(waiting)})
            done.update({sid: self._ends[sid] for sid in waiting})
        for sid in done:
            self._ends.pop(sid, None)
        self._for_replay -= done.keys()
        return done
