"""Membership: this node's lease (register, heartbeat, shut down) and the view of every node's lease.

Whether another node's lease expired is decided on this node's monotonic clock, never by comparing wall
clocks: a lease row changes with every renewal (LeaseObserver), and a row this node has watched unchanged for
a whole lease is expired. A step of the database host's clock, or of any node's wall clock, in either
direction, neither expires a live lease nor keeps a dead one: the same rule as ZooKeeper's and Kafka's
sessions (the server tracks a session by the heartbeats it receives, measured on its own clock). This node's
own lease is held until a lease after it sent a renewal that succeeded, also on its monotonic clock.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from broker.errors import LeaseLapsed, MetadataUnavailable, NotOwner
from broker.metadata.leases import ALIVE, EXPIRED, LeaseTable, NodeLease
from broker.metadata.pg_link import until_answered
from broker.periodic import Periodic

log = logging.getLogger("mqindex.broker.cluster")

DEFAULT_LEASE_MS = 10_000

#: the formats this version reads that an earlier release (0.3.0) does not: a format here is written only once
#: every live node announces it reads it (`reads_everywhere`), so nodes of the earlier release running beside
#: this one during a rolling upgrade can read every record written meanwhile
TIMED_STREAM_RECORDS = "stream_record_0x23"  # stream records with their append time (objects/format.py)
#: a move's range lent from the source's shared WAL (cluster/handoff_wal.py): a target that does not announce
#: it (0.3.0) opens the partition at its committed end, so the source uploads first instead
LENT_WAL_RANGES = "lent_wal_ranges"
READS = (TIMED_STREAM_RECORDS, LENT_WAL_RANGES)


def software_version() -> str:
    try:
        from importlib.metadata import version

        return version("mqindex")
    except Exception:  # noqa: BLE001 - not installed as a package: the announcement says so
        return "unknown"


class LeaseObserver:
    """Which leases expired, by watching the rows change over this node's monotonic `clock`.

    A row whose version (LeaseTable: epoch, expires_ms, ended) this observer has seen unchanged for `lease_ms`
    is expired; one seen to change (or to appear) since an earlier look is alive: it was renewed since that look,
    and it expires a lease after its last change is seen, unless it changes again. Rows at the observer's first
    look have no observation yet: until they change or a lease has passed, the database clock's verdict stands
    (the node's failover waits for a lease of watching anyway: `Membership.steady`). Safe against the node it
    judges: that node stops acknowledging a lease after it sent its last renewal that succeeded, which is before
    this observer first saw the renewal, so before the observer counts its lease expired (clocks running at the
    same rate; what they read does not matter)."""

    def __init__(self, lease_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_s = lease_ms / 1000
        self.clock = clock
        self._lock = threading.Lock()
        # node id -> (version seen, when first seen, whether it was seen to change or appear after the first look)
        self._seen: dict[int, tuple[tuple[int, int, bool], float, bool]] = {}
        self._first_look: float | None = None

    def watched_long_enough(self) -> bool:
        """Whether this observer has looked for a whole lease (before that, some verdicts are the database
        clock's)."""
        return self._first_look is not None and self.clock() - self._first_look >= self.lease_s

    def judge(self, rows: list[NodeLease], asked_at: float | None = None) -> list[NodeLease]:
        """The rows with their state as this observer sees it now. `asked_at`: when the rows were asked for (this
        clock, before the query). A row unchanged since it was first seen is known unchanged only until then: the
        query may have waited (for the database, for the GIL) before the judging, and the node may have renewed
        meanwhile, so a lease is counted from its first sighting to `asked_at`, never to the judging's time. A
        version seen for the first time is dated at the judging (later: it expires later)."""
        with self._lock:
            now = self.clock()
            asked = now if asked_at is None else min(asked_at, now)
            watched = self._first_look is not None
            if not watched:
                self._first_look = now
            out = []
            for n in rows:
                seen = self._seen.get(n.node_id)
                if seen is None or seen[0] != n.version:
                    seen = (n.version, now, watched)
                    self._seen[n.node_id] = seen
                if n.ended:
                    state = n.state
                elif asked - seen[1] >= self.lease_s:
                    state = EXPIRED
                elif seen[2]:
                    state = ALIVE
                else:
                    state = n.state  # not watched for a lease yet: the database clock's verdict
                out.append(n if state == n.state else dataclasses.replace(n, state=state))
            return out


class Membership:
    def __init__(self, leases: LeaseTable, node_id: int, node_epoch: int, http: str | None, kafka: str | None,
                 lease_ms: int = DEFAULT_LEASE_MS, on_fenced: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """clock: this node's monotonic clock (a test injects one); its lease and its verdicts on the others'
        are measured on it."""
        self.leases = leases
        self.clock = clock
        self.observer = LeaseObserver(lease_ms, clock)
        self.node_id = node_id
        self.node_epoch = node_epoch
        self.http = http
        self.kafka = kafka
        self.lease_ms = lease_ms
        self.on_fenced = on_fenced or (lambda: None)
        self.fenced = False
        #: why this node should not keep its lease (None: it may); asked before each renewal (the cluster sets it:
        #: a node whose WAL failed for good serves nothing, and lets its lease expire so the others take over)
        self.unfit: Callable[[], str | None] = lambda: None
        self._gave_up = False
        # monotonic time until which this node surely holds its lease: the time a renewal that succeeded was sent,
        # plus the lease (the metadata's expiry counts from when it applied the renewal, which is later)
        self.held_until = 0.0
        # monotonic time since which this node has held its lease without a gap (see `steady`)
        self.steady_since = 0.0
        self._view: tuple[float, dict[int, NodeLease]] = (0.0, {})
        #: formats every live node announced it reads, as of the last renewal (`reads_everywhere`)
        self._read_everywhere: frozenset[str] = frozenset()
        self._reads: dict[int, frozenset[str]] = {}  # node id -> what it announced, as of the last renewal
        # a renewal every fifth of a lease (Kafka's brokers: a heartbeat every 2 s for a 9 s session): a loaded node
        # whose renewal thread waits for the GIL or a core keeps its lease through a wait of four fifths of it
        # (waits of 1-2 s were logged on this project's 2-core CI machine at 3 s leases)
        self._beat = Periodic("broker-heartbeat", max(lease_ms / 5000, 0.05), self.heartbeat, from_start=True)

    def start(self) -> None:
        sent = self.clock()
        self.leases.register(self.node_id, self.node_epoch, self.http, self.kafka, self.lease_ms,
                             {"version": software_version(), "reads": list(READS)})
        self.held_until = sent + self.lease_ms / 1000
        self.steady_since = sent
        self._look()  # the observer's first look: its own verdicts from a lease on (`steady`)
        self._beat.start()
        log.info("node registered", extra={"node_id": self.node_id, "node_epoch": self.node_epoch,
                                           "http": self.http, "lease_ms": self.lease_ms})

    def heartbeat(self) -> None:
        if self.fenced:
            return
        why = self.unfit()
        if why is not None:
            if not self._gave_up:
                self._gave_up = True
                log.error("lease no longer renewed: the others will fail this node over", extra={
                    "node_id": self.node_id, "node_epoch": self.node_epoch, "reason": why})
            return
        sent = self.clock()
        renewed = self.leases.heartbeat(self.node_id, self.node_epoch, self.lease_ms)
        took = self.clock() - sent
        since = sent - (self.held_until - self.lease_ms / 1000)  # since the last renewal that succeeded was sent
        if since > self.lease_ms / 2000 or took > self.lease_ms / 3000:
            log.warning("lease renewal late", extra={"node_id": self.node_id, "node_epoch": self.node_epoch,
                                                     "since_last_s": round(since, 3), "renewal_s": round(took, 3),
                                                     "lease_s": self.lease_ms / 1000})
        if not renewed:
            self.fenced = True
            # the row moved to a newer epoch: a survivor fenced this node after its lease ran out (a renewal later
            # than the lease: `late_s` > 0), or a newer incarnation of it registered
            log.error("lease lost: this node was fenced (failed over by another node, or a newer incarnation of it "
                      "registered)", extra={"node_id": self.node_id, "node_epoch": self.node_epoch,
                                            "late_s": round(sent - self.held_until, 3)})
            self.on_fenced()
            return
        if sent > self.held_until:  # the lease had run out before this renewal: held again only from now
            self.steady_since = sent
        self.held_until = sent + self.lease_ms / 1000
        self._look()

    def _look(self) -> None:
        """Look at every lease (the observer watches them change) and note which formats every live node reads."""
        nodes = self.nodes()
        self._view = (self.clock(), {n.node_id: n for n in nodes if n.state == ALIVE})
        live = [n for n in nodes if n.state == ALIVE or n.node_id == self.node_id]
        self._read_everywhere = frozenset(w for w in READS if all(n.reads(w) for n in live))
        self._reads = {n.node_id: frozenset(w for w in READS if n.reads(w)) for n in live}

    def node_reads(self, node_id: int, what: str) -> bool:
        """Whether live node `node_id` announced (as of this node's last renewal) that it reads `what`; False for
        a node of an earlier release or one not seen live. A node not known at the last renewal (it joined since:
        renewals come a fifth of a lease apart) is looked up in the lease rows now: a move to a node that has just
        joined hands it a range of the shared WAL as to any other, rather than uploading first."""
        reads = self._reads.get(node_id)
        if reads is not None:
            return what in reads
        lease = self.alive(0).get(node_id)
        return lease is not None and lease.reads(what)

    def reads_everywhere(self, what: str) -> bool:
        """Whether every live node (as of this node's last renewal) announced it reads `what`: a node of an
        earlier release beside this one (a rolling upgrade) announces nothing, and this node then writes the
        formats that release reads."""
        return what in self._read_everywhere

    def steady(self) -> bool:
        """Whether this node has held its lease without a gap for a whole lease. Only then may it count other
        nodes' expired leases as their failure: after the metadata database stalled (or this node could not
        reach it) for longer than a lease, every lease is expired at once, and the other nodes get a lease's time
        to renew theirs before any is failed over. Its observer must also have watched the leases for a lease, so
        that every verdict it gives is its own (LeaseObserver)."""
        return (not self.fenced and self.clock() - self.steady_since >= self.lease_ms / 1000
                and self.observer.watched_long_enough())

    def check_lease(self) -> None:
        """Raise NotOwner unless this node surely still holds its lease. A node that cannot renew it (the
        metadata database unreachable) must stop acknowledging before the others may take its partitions over:
        with a local WAL they would open them at the committed end while this node went on writing the same
        offsets."""
        if self.fenced:
            raise NotOwner(f"node {self.node_id}: its lease belongs to a newer incarnation; not acknowledging")
        left = self.held_until - self.clock()
        if left <= 0:
            raise LeaseLapsed(f"node {self.node_id} could not renew its lease for {self.lease_ms} ms (the metadata "
                           "database does not answer): not acknowledging until it can")

    def within_lease(self, check: Callable[[], None], pause_s: float = 0.2) -> None:
        """Run `check`, a read of the metadata (the shared WAL's `check_current` after a group commit is stored and
        before it is acknowledged), asking it again while the metadata database does not answer and this node
        still holds its lease. No survivor can fence this node or replay its WAL before the lease has expired by the
        survivor's clock, after `held_until` here, so the answer waited for within the lease is still the truth; a
        metadata outage shorter than the lease then fails nothing (the WAL used to fail for good at the first
        unanswered check, and the node with it). Once the lease has lapsed, NotOwner (from the last outage
        error)."""
        until_answered(check, self.check_lease, pause_s)

    def nodes(self) -> list[NodeLease]:
        """Every node's lease, its state as this node's observer judges it (LeaseObserver)."""
        asked = self.clock()
        return self.observer.judge(self.leases.nodes(), asked)

    def alive(self, max_age_s: float = 0.5) -> dict[int, NodeLease]:
        """Live nodes (this one included), from a view at most `max_age_s` old; while the metadata database does not
        answer, the last view read (a Kafka client's metadata request is answered with the nodes last known live)."""
        at, view = self._view
        if self.clock() - at > max_age_s:
            try:
                view = {n.node_id: n for n in self.nodes() if n.state == ALIVE}
            except MetadataUnavailable:
                return view  # the last view read (at the last renewal at least): until the database answers again
            self._view = (self.clock(), view)
        return view

    def address(self, node_id: int) -> str | None:
        n = self.alive().get(node_id)
        return n.http if n is not None else None

    def stop(self, shut_down: bool = True) -> None:
        self._beat.stop()
        try:
            if shut_down and not self.fenced:
                self.leases.shut_down(self.node_id, self.node_epoch)
        except MetadataUnavailable as exc:  # the lease is left to expire: the others see a node gone, as after a crash
            log.warning("the lease could not be marked shut down; it expires in its time",
                        extra={"node_id": self.node_id, "node_epoch": self.node_epoch, "error": str(exc)})
        finally:
            self.leases.close()
