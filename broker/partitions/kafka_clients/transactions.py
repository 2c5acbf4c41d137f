"""The transaction coordinator's state machine, kept in the controller metadata KV so that it survives restarts
and moves with the coordinator (like the groups' committed offsets):

    transactions/<transactional id>   {"producer_id", "epoch", "timeout_ms", "state", "partitions",
                                       "groups", "started_ms", "marked", "seq", "next"}
    txn_offsets/<producer id>/<group> {"<topic>/<partition>": [offset, metadata], ...}

States, as Kafka's: Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) -> PrepareCommit | PrepareAbort
(EndTxn; the decision is stored before any marker is written; `marked` lists the partitions whose marker is
durable; a partition may be led by any node, the MarkerWriter writes its marker there) -> CompleteCommit |
CompleteAbort (every marker durable, the group offsets moved or dropped) -> Ongoing again on the next
transaction. A transaction found in a Prepare state (a coordinator stopped or killed in the middle of EndTxn, a
partition whose leader did not take its marker) is completed by the next request for its transactional id or by
`tick`, which also aborts the Ongoing transactions older than their timeout (bumping the epoch, as Kafka does, so
the late producer is fenced rather than committing half of it).

InitProducerId with a transactional id keeps one producer id per transactional id and bumps its epoch (an
Ongoing transaction of the previous incarnation is aborted first): a request carrying an older epoch is
PRODUCER_FENCED. Offsets of TxnOffsetCommit wait under the producer id and become the group's committed offsets
only when the transaction commits. Answers are Kafka's error names; api/kafka maps them to codes.

EndTxn is answered once the decision (Prepare*) is stored, as Kafka answers after PREPARE_COMMIT is in its
transaction log: the markers, the group offsets and Complete* follow on a background thread, and the next request
of that transactional id (AddPartitionsToTxn of its next transaction, InitProducerId, EndTxn again) waits for
them first. A completion with no group offsets to move is not stored on its own: it is kept in memory (standing
for the stored record it completes: another coordinator's write since makes the stored one win), or stored by
`tick` after a second when nothing follows.

One metadata write per transaction. Each decision carries the transaction's number (`seq`, written into its
markers: a partition never takes a marker of a number it has durable already, see txn_partition.py) and
`next`, the transaction's partitions declared for the producer's next transaction: that transaction's
AddPartitionsToTxn naming only partitions of `next` is answered from memory, without a write (a partition
outside it, or AddOffsetsToTxn, stores the Ongoing state as before). This holds because of what a coordinator
that finds such a record without having made it (after a kill -9) does: it writes the decided markers again
(a partition that has them skips them, so a next transaction begun there stays open), then takes the next
transaction as Ongoing over `next` (started then): the producer commits or aborts it, InitProducerId aborts it,
its timeout aborts it. A producer that commits and stays idle gets a record without `next` from `tick` a second
later, so only a coordinator killed within that second can time out (and fence) an idle producer.

Every method blocks (metadata calls, markers waited for): run them off an event loop. Requests for one
transactional id are serialized by a lock per id. `close` (the node's close) stops the completion threads, waiting
a bounded time for completions under way; one not finished is completed again from the stored decision.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace

from broker.metadata import MetadataClient
from broker.partitions.kafka_clients import group_offsets, producer_ids

log = logging.getLogger("mqindex.broker.transactions")

PREFIX, OFFSETS_PREFIX = "transactions/", "txn_offsets/"
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Empty", "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"
PREPARED, COMPLETE = (PREPARE_COMMIT, PREPARE_ABORT), (COMPLETE_COMMIT, COMPLETE_ABORT)
MAX_EPOCH = 32766
MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default
MAX_SEQ = 2**31 - 1  # a marker's coordinator epoch field is an int32

NONE = "NONE"
FENCED = "PRODUCER_FENCED"
BAD_MAPPING = "INVALID_PRODUCER_ID_MAPPING"
BAD_STATE = "INVALID_TXN_STATE"
BAD_TIMEOUT = "INVALID_TRANSACTION_TIMEOUT"
NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"
SETTLE_S = 60.0  # how long a request waits for its transactional id's previous transaction to complete
UNSTORED_MS = 1_000  # how long a completion may stay in memory only before `tick` stores it
CLOSE_S = 10.0  # how long `close` waits for the completions under way

#: writes the marker on each partition, wherever it is led, and waits until they are durable:
#: (partitions, producer id, epoch, commit, transaction number) -> the partitions not written, with why
MarkerWriter = Callable[[list[tuple[str, int]], int, int, bool, int], dict[tuple[str, int], str]]

_IN_MEMORY = ("stored", "known")  # TxnState fields never stored


@dataclass
class TxnState:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: list[tuple[str, int]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    started_ms: int = 0
    marked: list[tuple[str, int]] = field(default_factory=list)  # partitions with their marker (a prepared txn)
    seq: int = 0  # the number of the last decided transaction (in its markers)
    next: list[tuple[str, int]] = field(default_factory=list)  # declared for the next transaction (module doc)
    stored: str = field(default="", compare=False)  # in memory: the stored record this state stands for
    known: bool = field(default=False, compare=False)  # in memory: this coordinator made or kept that record

    def encode(self) -> str:
        """The stored record: the fields in declaration order, as `dataclasses.asdict` gave them (the JSON is the
        same), without its deep copy (asdict took 90 us of a 100 us encode, once per transaction in EndTxn's
        decision write and for every kept state at each tick)."""
        d = {k: getattr(self, k) for k in _STORED}
        for k in ("partitions", "marked", "next"):
            d[k] = [list(tp) for tp in d[k]]
        d["groups"] = list(d["groups"])
        return json.dumps(d)

    @staticmethod
    def decode(raw: str) -> TxnState:
        d = json.loads(raw)
        for k in ("partitions", "marked", "next"):
            d[k] = [(str(t), int(p)) for t, p in d.get(k, [])]
        return TxnState(**d, stored=raw)

    def copy(self) -> TxnState:
        return replace(self, partitions=list(self.partitions), groups=list(self.groups), marked=list(self.marked),
                       next=list(self.next))

    def declared(self) -> list[tuple[str, int]]:
        """The partitions the stored record declares for records of its producer's current transaction."""
        if not self.stored:
            return []
        st = TxnState.decode(self.stored)
        return st.partitions if st.state == ONGOING else st.next


_STORED = tuple(f.name for f in fields(TxnState) if f.name not in _IN_MEMORY)  # TxnState.encode's fields


def pending_offsets(meta: MetadataClient, group: str) -> set[tuple[str, int]]:
    """The (topic, partition)s for which the group has offsets in a transaction not completed yet (TxnOffsetCommit
    of an open transaction, or of one decided whose completion has not moved them yet): OffsetFetch with
    require_stable answers UNSTABLE_OFFSET_COMMIT for them."""
    out: set[tuple[str, int]] = set()
    for key, raw in meta.kv_items(OFFSETS_PREFIX).items():
        _pid, _, g = key[len(OFFSETS_PREFIX):].partition("/")
        if g == group:
            for tp in json.loads(raw):
                t, _, p = tp.rpartition("/")
                out.add((t, int(p)))
    return out


class TxnError(Exception):
    """A marker could not be written now (its partition is moving, led by no live node, its leader did not
    answer): the transaction stays prepared and its remaining markers are written later."""


class TransactionCoordinator:
    def __init__(self, meta: MetadataClient, node_id: int, write_marker: MarkerWriter,
                 clock: Callable[[], int]) -> None:
        self.meta = meta
        self.node_id = node_id
        self.write_marker = write_marker
        self.clock = clock
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._completing: dict[str, Future[None]] = {}  # EndTxn's markers and completion, under way
        #: the state of a transactional id as this coordinator knows it, standing for a stored record (its
        #: `stored`) as long as that is still the stored one: a completion not stored, a transaction begun from
        #: memory (module doc); with the time it was kept
        self._mem: dict[str, tuple[TxnState, int]] = {}
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="txn-complete")

    def close(self, timeout_s: float = CLOSE_S) -> None:
        """Stop the completion threads: a completion not started is dropped (the stored Prepare* is completed
        again by the next coordinator of its id), the ones under way are waited for up to `timeout_s`, and the
        completions kept in memory only are stored."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout_s
        for t in list(getattr(self._pool, "_threads", ())):  # the pool's workers (shutdown() has no bound)
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                log.warning("a transaction completion thread did not stop in time", extra={"thread": t.name})
        self._store_idle(0)

    def _lock(self, tid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tid, threading.Lock())

    def load(self, tid: str) -> TxnState | None:
        """The state: as kept in memory while its stored record is still the stored one, else the stored record
        (one with a next transaction declared, not made here, is that transaction, Ongoing: module doc)."""
        raw = self.meta.kv_get(PREFIX + tid)
        if raw is None:
            return None
        with self._guard:
            kept = self._mem.get(tid)
            if kept is not None and kept[0].stored == raw:
                st = kept[0].copy()
                st.known = True
                return st
            if kept is not None:  # stored past it (another coordinator wrote since): the stored record wins
                del self._mem[tid]
        st = TxnState.decode(raw)
        if st.state in COMPLETE and st.next:
            self._take_next(st)
            self._keep(st)
        return st

    def _take_next(self, st: TxnState) -> None:
        """A decided transaction whose record declares a next one, found without having made it: the next one
        may have records on those partitions (begun from another coordinator's memory), so it is Ongoing."""
        st.state, st.partitions, st.groups, st.marked = ONGOING, list(st.next), [], []
        st.started_ms, st.next = self.clock(), []

    def _keep(self, st: TxnState) -> None:
        with self._guard:
            self._mem[st.transactional_id] = (st.copy(), self.clock())

    def _save(self, st: TxnState, put: dict[str, str] | None = None, delete: list[str] | None = None) -> None:
        """Store the state (with other keys, in one metadata write); a completion kept in memory is stored by it."""
        raw = st.encode()
        if put or delete:
            self.meta.kv_update({**(put or {}), PREFIX + st.transactional_id: raw}, delete or [])
        else:
            self.meta.kv_put(PREFIX + st.transactional_id, raw)
        st.stored, st.known = raw, True
        self._keep(st)

    def _settle(self, tid: str) -> None:
        """Wait for the background completion of the id's last transaction (its next request comes after)."""
        with self._guard:
            f = self._completing.get(tid)
        if f is not None:
            try:
                f.result(SETTLE_S)
            except Exception:  # noqa: BLE001 - logged by the completion; the request completes it itself
                pass

    # -- the producer's requests ------------------------------------------------------------------------
    def init_producer_id(self, tid: str, timeout_ms: int) -> tuple[str, int, int]:
        """(error, producer id, epoch) for a (re)starting transactional producer."""
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            return BAD_TIMEOUT, -1, -1
        self._settle(tid)
        with self._lock(tid):
            st = self.load(tid)
            if st is None:
                st = TxnState(tid, producer_ids.allocate(self.meta, self.node_id), 0, timeout_ms)
                self._save(st)
                return NONE, st.producer_id, st.epoch
            self._finish_prepared(st)
            if st.state == ONGOING:  # the previous incarnation's transaction: aborted, fencing it
                st.epoch = self._bump(st)
                self._end(st, commit=False)
            if st.epoch >= MAX_EPOCH:
                st.producer_id, st.epoch = producer_ids.allocate(self.meta, self.node_id), 0
            else:
                st.epoch += 1
            st.timeout_ms, st.state, st.partitions, st.groups, st.next = timeout_ms, EMPTY, [], [], []
            self._save(st)
            log.info("transactional producer initialised",
                     extra={"transactional_id": tid, "producer_id": st.producer_id, "epoch": st.epoch})
            return NONE, st.producer_id, st.epoch

    def _check(self, st: TxnState | None, pid: int, epoch: int) -> str:
        if st is None or st.producer_id != pid:
            return BAD_MAPPING
        if epoch != st.epoch:
            return FENCED
        return NONE

    def _begin(self, st: TxnState) -> None:
        if st.state != ONGOING:
            st.state, st.partitions, st.groups, st.started_ms, st.marked = ONGOING, [], [], self.clock(), []

    def _current(self, tid: str, pid: int, epoch: int) -> tuple[TxnState | None, str]:
        """The transaction's state and NONE when this producer id and epoch own it, else (None, the error)."""
        st = self.load(tid)
        code = self._check(st, pid, epoch)
        return (st, code) if code == NONE else (None, code)

    def _add(self, tid: str, pid: int, epoch: int, add: Callable[[TxnState], None]) -> str:
        """Begin the transaction if none is ongoing and add to it (partitions or a group). Stored unless the
        stored record declares every partition already and no group is added (module doc)."""
        self._settle(tid)
        with self._lock(tid):
            st, code = self._current(tid, pid, epoch)
            if st is None:
                return code
            self._finish_prepared(st)
            self._begin(st)
            groups = list(st.groups)
            add(st)
            if st.known and st.groups == groups and set(st.partitions) <= set(st.declared()):
                self._keep(st)  # begun or added from memory: the stored record covers it
            else:
                st.next = []
                self._save(st)
            return NONE

    def add_partitions(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> str:
        def add(st: TxnState) -> None:
            st.partitions += [tp for tp in partitions if tp not in st.partitions]
        return self._add(tid, pid, epoch, add)

    def add_offsets(self, tid: str, pid: int, epoch: int, group: str) -> str:
        def add(st: TxnState) -> None:
            if group not in st.groups:
                st.groups.append(group)
        return self._add(tid, pid, epoch, add)

    def txn_offset_commit(self, tid: str, pid: int, epoch: int, group: str,
                          offsets: dict[tuple[str, int], tuple[int, str | None]]) -> str:
        """Keep the offsets until the transaction ends (the group sees them only if it commits)."""
        with self._lock(tid):
            st, code = self._current(tid, pid, epoch)
            if st is None:
                return code
            if st.state != ONGOING or group not in st.groups:
                return BAD_STATE
            key = f"{OFFSETS_PREFIX}{pid}/{group}"
            raw = self.meta.kv_get(key)
            pending = json.loads(raw) if raw is not None else {}
            pending.update({f"{t}/{p}": [o, m or ""] for (t, p), (o, m) in offsets.items()})
            self.meta.kv_put(key, json.dumps(pending))
            return NONE

    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> str:
        """Store the decision and answer; the markers and the completion follow (see the module)."""
        self._settle(tid)
        with self._lock(tid):
            st, code = self._current(tid, pid, epoch)
            if st is None:
                return code
            self._finish_prepared(st)
            if st.state == ONGOING:
                self._prepare(st, commit, declare_next=True)
                self._save(st)
                with self._guard:
                    self._completing[tid] = self._pool.submit(self._complete_later, tid, st.producer_id, st.epoch)
                return NONE
            if st.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
                return NONE  # a retry of the EndTxn that completed it
            if st.state == COMPLETE_ABORT and commit:
                return FENCED  # aborted by its timeout (the epoch was bumped): the producer must start again
            return BAD_STATE

    # -- completion ------------------------------------------------------------------------------------
    def _bump(self, st: TxnState) -> int:
        return st.epoch + 1 if st.epoch < MAX_EPOCH else st.epoch

    def _prepare(self, st: TxnState, commit: bool, declare_next: bool) -> None:
        """The decision, numbered; with `declare_next`, its partitions are declared for the next transaction."""
        st.state, st.marked = PREPARE_COMMIT if commit else PREPARE_ABORT, []
        st.seq = st.seq + 1 if st.seq < MAX_SEQ else 1
        st.next = list(st.partitions) if declare_next else []

    def _end(self, st: TxnState, commit: bool) -> None:
        """Store the decision (no next transaction declared: the epoch was bumped), then complete it."""
        self._prepare(st, commit, declare_next=False)
        self._save(st)
        self._complete(st)

    def _complete_later(self, tid: str, pid: int, epoch: int) -> None:
        """EndTxn's markers and completion, on the pool; a failure leaves the transaction prepared for the next
        request of the id or `tick`."""
        try:
            with self._lock(tid):
                st = self.load(tid)
                if st is not None and (st.producer_id, st.epoch) == (pid, epoch):
                    self._finish_prepared(st, store=False)
        except Exception as exc:  # noqa: BLE001 - completed again by the next request or tick
            log.warning("transaction not completed yet", extra={"transactional_id": tid, "error": str(exc)})
        finally:
            with self._guard:
                self._completing.pop(tid, None)

    def _finish_prepared(self, st: TxnState, store: bool = True) -> None:
        if st.state in PREPARED:
            self._complete(st, store)

    def _complete(self, st: TxnState, store: bool = True) -> None:
        """Markers on every partition (wherever each is led), the group offsets moved (commit) or dropped
        (abort), then Complete*. The partitions whose marker is durable are kept with the state, so a later try
        writes only the others. Every step may be done again after a crash: a partition that has the numbered
        marker already skips it. A decision found stored without having made it, which declares a next
        transaction, leaves that transaction Ongoing (module doc)."""
        commit = st.state == PREPARE_COMMIT
        left = [tp for tp in st.partitions if tp not in st.marked]
        if left:
            try:
                failed = self.write_marker(left, st.producer_id, st.epoch, commit, st.seq)
            except Exception as exc:  # noqa: BLE001 - written again later, as a refused marker
                failed = {tp: str(exc) for tp in left}
            if failed:
                st.marked += [tp for tp in left if tp not in failed]
                self._save(st)
                (t, p), why = next(iter(failed.items()))
                raise TxnError(f"transaction {st.transactional_id}: {len(failed)} of {len(st.partitions)} markers "
                               f"not written yet, {t}-{p}: {why}")
        put: dict[str, str] = {}
        delete: list[str] = []
        for group in st.groups:
            key = f"{OFFSETS_PREFIX}{st.producer_id}/{group}"
            raw = self.meta.kv_get(key)
            if raw is not None and commit:
                offsets = {(tp.rsplit("/", 1)[0], int(tp.rsplit("/", 1)[1])): (int(o), str(m))
                           for tp, (o, m) in json.loads(raw).items()}
                put.update(group_offsets.entries(group, offsets))
            if raw is not None:
                delete.append(key)
        st.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        # debug, not info: a line per transaction
        log.debug("transaction ended", extra={"transactional_id": st.transactional_id, "committed": commit,
                                              "partitions": len(st.partitions), "groups": len(st.groups)})
        if st.next and not st.known:  # not made here: the declared next transaction may have begun
            self._take_next(st)
            self._save(st, put, delete)
        elif store or put or delete:  # the group offsets move in the same write as the completion
            self._save(st, put, delete)
        else:
            self._keep(st)

    def _store_idle(self, idle_ms: int) -> None:
        """Store the completions kept in memory only (and drop the next transaction declared by their record)
        for `idle_ms` or more: nothing followed them."""
        now = self.clock()
        with self._guard:
            idle = [tid for tid, (st, since) in self._mem.items()
                    if st.state in COMPLETE and (st.next or st.stored != st.encode()) and now - since >= idle_ms]
        for tid in idle:
            try:
                with self._lock(tid):
                    st = self.load(tid)
                    if st is not None and st.known and st.state in COMPLETE:
                        st.next = []
                        self._save(st)
            except Exception as exc:  # noqa: BLE001 - the stored decision is completed again later
                log.warning("transaction completion not stored", extra={"transactional_id": tid, "error": str(exc)})

    def tick(self, mine: Callable[[str], bool]) -> int:
        """Complete prepared transactions and abort timed-out ones among those `mine` coordinates; how many
        were ended. A transaction whose markers cannot be written now is left for the next tick."""
        ended = 0
        self._store_idle(UNSTORED_MS)
        now = self.clock()
        for key, raw in self.meta.kv_items(PREFIX).items():
            tid = key[len(PREFIX):]
            if not mine(tid):
                continue
            st = TxnState.decode(raw)
            late = st.state == ONGOING and now - st.started_ms > st.timeout_ms
            if not late and st.state not in PREPARED and not (st.state in COMPLETE and st.next):
                continue
            with self._lock(tid):
                fresh = self.load(tid)
                if fresh is None:
                    continue
                try:
                    if fresh.state in PREPARED:
                        self._complete(fresh)
                        ended += 1
                    elif fresh.state == ONGOING and self.clock() - fresh.started_ms > fresh.timeout_ms:
                        log.warning("transaction timed out: aborted",
                                    extra={"transactional_id": tid, "timeout_ms": fresh.timeout_ms})
                        fresh.epoch = self._bump(fresh)
                        self._end(fresh, commit=False)
                        ended += 1
                except TxnError as exc:
                    log.warning("transaction not completed yet", extra={"transactional_id": tid, "error": str(exc)})
        return ended
