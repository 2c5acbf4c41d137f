"""AssignmentWatcher: makes this node lead exactly the partitions the metadata assigns to it.

Nodes learn of changes by a short poll of the metadata log (every `interval_s`, default 0.1 s): a poll is
one indexed `SELECT ... WHERE log_offset > ?` that returns nothing when nothing changed, it works the same
on SQLite and PostgreSQL, and a reassignment is seen within one interval. (PostgreSQL LISTEN/NOTIFY would
save the empty polls but needs a connection per node held open outside the log's transactions, and does
nothing for SQLite.)

Each look: catch up with the log, forget topics any node deleted, learn topics other nodes created, then
for every partition
- assigned elsewhere and led here: hand it off (source steps);
- assigned here and not led here: take it over once its streams are closed (target steps).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from broker.cluster import handoff
from broker.cluster.assignment import leaders
from broker.errors import MetadataUnavailable
from broker.partitions.dispatcher import CatchUp
from broker.partitions.partition_map import REPLAYING, PartitionMap

log = logging.getLogger("mqindex.broker.cluster")

# partitions assigned here that the watcher does not open: fenced ones (another node holds them), and those a
# failover is replaying the dead node's acknowledged records into (served once that is done)
NOT_TAKEN = ("fenced", REPLAYING)

#: while a partition assigned here waits for its previous owner to close its streams, looks come this often (a
#: move's producers get errors from the source's hand-off until the target serves), for at most WAITING_FOR_S
#: after the wait began (a dead source's streams are closed by a failover, seconds later: looked at as usual)
WAITING_INTERVAL_S = 0.005
WAITING_FOR_S = 3.0


class AssignmentWatcher:
    def __init__(self, parts: PartitionMap, sync_index: Callable[[], None], catch_up: Callable[[CatchUp], None],
                 interval_s: float = 0.1, on_look: Callable[[], None] | None = None) -> None:
        self.parts = parts
        self.sync_index = sync_index
        self.catch_up = catch_up
        self.interval_s = interval_s
        self.on_look = on_look  # e.g. the failover check, after each look
        #: whether a partition moved to this target may be lent from this node's shared WAL (the target reads such
        #: a range) rather than uploaded first (the cluster sets it from the targets' announcements)
        self.lends_to: Callable[[int], bool] = lambda target: True
        self.lock = threading.Lock()  # one reconcile at a time (the thread, a drain, a test)
        self._stop = threading.Event()
        self._waiting_since: float | None = None  # a take-over found the streams still open since then
        self._bodies: dict[str, str] = {}  # the topics' stored values at the last look (a count changed: re-read)
        self._thread = threading.Thread(target=self._run, name="broker-assignment", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._next_wait()):
            try:
                self.reconcile()
            except MetadataUnavailable:  # next look tries again; the metadata link logs each change of state once
                pass
            except Exception as exc:  # noqa: BLE001 - next look tries again
                log.warning("assignment look failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    def _next_wait(self) -> float:
        since = self._waiting_since
        if since is not None and time.monotonic() - since < WAITING_FOR_S:
            return min(self.interval_s, WAITING_INTERVAL_S)
        return self.interval_s

    def reconcile(self) -> None:
        with self.lock:
            if self._stop.is_set():
                return
            parts = self.parts
            parts.meta.catch_up()
            parts.forget_deleted()  # topics deleted by any node: stop serving them, drop their cached records
            bodies = parts.registry.bodies()
            for name, body in bodies.items():
                known = parts.cached_topic(name)
                # a topic created elsewhere, or given more partitions (its stored value changed: parsed only then)
                if known is None or (body is not self._bodies.get(name)
                                     and parts.registry.count_in(body) != known.partitions):
                    info = parts.registry.get(name, refresh=False)
                    if info is not None:
                        parts.add_topic(info)
            self._bodies = bodies
            lead = leaders(parts.meta)
            waiting = False
            for p in parts.all():
                want = lead.get((p.topic.topic_id, p.index))
                if want is None:
                    continue
                if p.owned and want.node != parts.node_id:
                    handoff.hand_off(parts, p, want.node, self.sync_index, lend=self.lends_to(want.node))
                elif not p.owned and want.node == parts.node_id and not p.why_not_owned.startswith(NOT_TAKEN):
                    waiting |= not handoff.take_over(parts, p, self.catch_up)
            if not waiting:
                self._waiting_since = None
            elif self._waiting_since is None:
                self._waiting_since = time.monotonic()
            if self.on_look is not None:
                self.on_look()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
