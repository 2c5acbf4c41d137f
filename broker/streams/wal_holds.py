"""WalHolds: the streams not open here whose records this node's shared WAL must keep for another node.

- Lent (`lend`): a stream moved away without uploading first (broker/cluster/handoff.py). Its next owner reads
  its last records from this WAL (broker/streams/moved_range.py).
- Held for a replay (`hold_for_replay`): after a restart, a stream that another node's failover of this node's
  previous incarnation took, with records acknowledged by that incarnation and not committed yet. That failover
  has recorded its replay of this WAL and not finished it (a replay that failed and is retried): letting them go
  at this node's first upload left the survivor nothing to replay, and it served the partition without them.

Either is kept until the metadata shows the stream committed up to its end here, or deleted (`due`). One held for
a replay is also let go once that failover is over: it committed all it read, so a record still not committed is
one it will never replay (logged). Those records' own WAL slots are released then, not the stream's offsets: this
node may lead the stream later, and its own appends at those offsets must hold the WAL until they are committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.metadata import MetadataClient
from broker.streams.wal_trim import WalSlot

log = logging.getLogger("mqindex.broker.streams")

_FAR = 1 << 62


#: what `replay_pending` answers for a replay recorded by an earlier release, which did not name its streams: every
#: stream is taken as replayed (compared by identity; stream ids are never negative)
EVERY_STREAM: frozenset[int] = frozenset({-1})


def replays(streams: frozenset[int], sid: int) -> bool:
    """Whether the replay of `streams` (as `replay_pending` answers) takes stream `sid`."""
    return streams is EVERY_STREAM or sid in streams


class WalHolds:
    def __init__(self, meta: MetadataClient) -> None:
        self.meta = meta
        self._ends: dict[int, int] = {}  # stream id -> the end offset its WAL records reach here
        self._for_replay: dict[int, list[WalSlot]] = {}  # those held for a replay -> their records' WAL slots
        #: with a shared WAL (set by the node): the streams another node's failover of this node's previous
        #: incarnation is replaying from this WAL (None: no such failover under way)
        self.replay_pending: Callable[[], frozenset[int] | None] | None = None

    def __contains__(self, sid: int) -> bool:
        return sid in self._ends

    def __len__(self) -> int:
        return len(self._ends)

    def ids(self) -> set[int]:
        return set(self._ends)

    def lent_ids(self) -> set[int]:
        """The streams lent to a move (not those held for a replay)."""
        return set(self._ends) - self._for_replay.keys()

    def committed_end(self, sid: int) -> int:
        """The stream's committed end in the metadata (one the metadata does not know, deleted with its topic:
        none of its records is kept)."""
        s = self.meta.image.streams.get(sid)
        return _FAR if s is None else s.end_offset

    def replayed_elsewhere(self) -> frozenset[int] | None:
        return None if self.replay_pending is None else self.replay_pending()

    def lend(self, ends: dict[int, int]) -> None:
        for sid, end in ends.items():
            self._ends[sid] = max(end, self._ends.get(sid, end))
            self._for_replay.pop(sid, None)  # a move reads it now: kept until committed, as any lent stream

    def hold_for_replay(self, slots: dict[int, list[WalSlot]]) -> None:
        if not slots:
            return
        log.info("WAL records of streams a failover of this node is replaying elsewhere are kept until it "
                 "commits them", extra={"streams": sorted(slots)})
        for sid, held in slots.items():
            end = max(s.last_offset for s in held)
            self._ends[sid] = max(end, self._ends.get(sid, end))
            self._for_replay.setdefault(sid, []).extend(held)

    def due(self) -> tuple[dict[int, int], list[WalSlot]]:
        """The holds to let go now, dropped from here: (stream id -> end, committed that far in the metadata;
        the WAL slots of the streams held for a replay that is over without committing them)."""
        over = bool(self._for_replay) and self.replayed_elsewhere() is None  # asked first: it refreshes the image
        done: dict[int, int] = {}
        for sid, end in list(self._ends.items()):
            if self.committed_end(sid) >= end:
                done[sid] = end
        abandoned = [sid for sid in self._for_replay if sid not in done] if over else []
        if abandoned:
            log.error("acknowledged WAL records of a stream this node does not own were not replayed by its "
                      "failover", extra={"streams": sorted(abandoned)})
        released: list[WalSlot] = []
        for sid in abandoned:
            released += self._for_replay.pop(sid)
            self._ends.pop(sid, None)
        for sid in done:
            self._ends.pop(sid, None)
            self._for_replay.pop(sid, None)
        return done, released
