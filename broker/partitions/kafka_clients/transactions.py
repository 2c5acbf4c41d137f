"""The transaction coordinator's state machine, kept in the controller metadata KV so that it survives restarts
and moves with the coordinator (like the groups' committed offsets):

    transactions/<transactional id>   {"producer_id", "epoch", "timeout_ms", "state", "partitions",
                                       "groups", "started_ms", "marked"}
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
them first. A completion with no group offsets to move is not stored on its own: it is kept in memory and stored
by the next write of that transactional id (the next transaction's Ongoing), or by `tick` when none comes. If the
coordinator stops before that, the stored Prepare* is completed again by whoever coordinates the id next
(writing a marker twice changes nothing a reader sees).

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
from dataclasses import asdict, dataclass, field

from broker.metadata import MetadataClient
from broker.partitions.kafka_clients import group_offsets, producer_ids

log = logging.getLogger("mqindex.broker.transactions")

PREFIX, OFFSETS_PREFIX = "transactions/", "txn_offsets/"
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Empty", "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"
MAX_EPOCH = 32766
MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms default

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
#: (partitions, producer id, epoch, commit) -> the partitions not written, with why
MarkerWriter = Callable[[list[tuple[str, int]], int, int, bool], dict[tuple[str, int], str]]


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

    def encode(self) -> str:
        d = asdict(self)
        d["partitions"] = [list(tp) for tp in self.partitions]
        d["marked"] = [list(tp) for tp in self.marked]
        return json.dumps(d)

    @staticmethod
    def decode(raw: str) -> TxnState:
        d = json.loads(raw)
        d["partitions"] = [(str(t), int(p)) for t, p in d["partitions"]]
        d["marked"] = [(str(t), int(p)) for t, p in d.get("marked", [])]
        return TxnState(**d)


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
        self._unstored: dict[str, tuple[TxnState, int]] = {}  # completed, stored still as Prepare*: (state, since)
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
        with self._guard:
            unstored = list(self._unstored)
        for tid in unstored:
            try:
                with self._lock(tid):
                    st = self.load(tid)
                    if st is not None and st.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
                        self._save(st)
            except Exception as exc:  # noqa: BLE001 - the stored decision is completed again later
                log.warning("transaction completion not stored at close",
                            extra={"transactional_id": tid, "error": str(exc)})

    def _lock(self, tid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tid, threading.Lock())

    def load(self, tid: str) -> TxnState | None:
        """The stored state, or the completion of it kept in memory (see the module)."""
        raw = self.meta.kv_get(PREFIX + tid)
        if raw is None:
            return None
        st = TxnState.decode(raw)
        with self._guard:
            done = self._unstored.get(tid)
        if done is not None:
            d = done[0]
            # the same transaction (not a later one of the same epoch, prepared by another coordinator since)
            if (st.state in (PREPARE_COMMIT, PREPARE_ABORT)
                    and (d.producer_id, d.epoch, d.started_ms, d.partitions) == (st.producer_id, st.epoch,
                                                                                 st.started_ms, st.partitions)
                    and d.state == (COMPLETE_COMMIT if st.state == PREPARE_COMMIT else COMPLETE_ABORT)):
                return TxnState.decode(d.encode())
            with self._guard:  # stored past it (another coordinator wrote since): the stored state wins
                if self._unstored.get(tid) is done:
                    del self._unstored[tid]
        return st

    def _save(self, st: TxnState, put: dict[str, str] | None = None, delete: list[str] | None = None) -> None:
        """Store the state (with other keys, in one metadata write); a completion kept in memory is stored by it."""
        if put or delete:
            self.meta.kv_update({**(put or {}), PREFIX + st.transactional_id: st.encode()}, delete or [])
        else:
            self.meta.kv_put(PREFIX + st.transactional_id, st.encode())
        with self._guard:
            self._unstored.pop(st.transactional_id, None)

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
            st.timeout_ms, st.state, st.partitions, st.groups = timeout_ms, EMPTY, [], []
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
        """Begin the transaction if none is ongoing and add to it (partitions or a group)."""
        self._settle(tid)
        with self._lock(tid):
            st, code = self._current(tid, pid, epoch)
            if st is None:
                return code
            self._finish_prepared(st)
            self._begin(st)
            add(st)
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
                st.state, st.marked = PREPARE_COMMIT if commit else PREPARE_ABORT, []
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

    def _end(self, st: TxnState, commit: bool) -> None:
        """Store the decision, then complete it."""
        st.state, st.marked = PREPARE_COMMIT if commit else PREPARE_ABORT, []
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
        if st.state in (PREPARE_COMMIT, PREPARE_ABORT):
            self._complete(st, store)

    def _complete(self, st: TxnState, store: bool = True) -> None:
        """Markers on every partition (wherever each is led), the group offsets moved (commit) or dropped
        (abort), then Complete*. The partitions whose marker is durable are kept with the state, so a later try
        writes only the others. Every step may be done again after a crash: a second marker for a closed
        transaction changes nothing."""
        commit = st.state == PREPARE_COMMIT
        left = [tp for tp in st.partitions if tp not in st.marked]
        if left:
            try:
                failed = self.write_marker(left, st.producer_id, st.epoch, commit)
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
        if store or put or delete:  # the group offsets move in the same write as the completion
            self._save(st, put, delete)
        else:
            with self._guard:
                self._unstored[st.transactional_id] = (TxnState.decode(st.encode()), self.clock())
        log.info("transaction ended", extra={"transactional_id": st.transactional_id, "committed": commit,
                                             "partitions": len(st.partitions), "groups": len(st.groups)})

    def tick(self, mine: Callable[[str], bool]) -> int:
        """Complete prepared transactions and abort timed-out ones among those `mine` coordinates; how many
        were ended. A transaction whose markers cannot be written now is left for the next tick."""
        ended = 0
        now = self.clock()
        with self._guard:
            idle = [tid for tid, (_st, since) in self._unstored.items() if now - since >= UNSTORED_MS]
        for tid in idle:  # completions no later write of their id has stored
            with self._lock(tid):
                st = self.load(tid)
                if st is not None and st.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
                    self._save(st)
        for key, raw in self.meta.kv_items(PREFIX).items():
            tid = key[len(PREFIX):]
            if not mine(tid):
                continue
            st = TxnState.decode(raw)
            late = st.state == ONGOING and now - st.started_ms > st.timeout_ms
            if not late and st.state not in (PREPARE_COMMIT, PREPARE_ABORT):
                continue
            with self._lock(tid):
                fresh = self.load(tid)
                if fresh is None:
                    continue
                try:
                    if fresh.state in (PREPARE_COMMIT, PREPARE_ABORT):
                        self._complete(fresh)
                        ended += 1
                    elif fresh.state == ONGOING and now - fresh.started_ms > fresh.timeout_ms:
                        log.warning("transaction timed out: aborted",
                                    extra={"transactional_id": tid, "timeout_ms": fresh.timeout_ms})
                        fresh.epoch = self._bump(fresh)
                        self._end(fresh, commit=False)
                        ended += 1
                except TxnError as exc:
                    log.warning("transaction not completed yet", extra={"transactional_id": tid, "error": str(exc)})
        return ended
