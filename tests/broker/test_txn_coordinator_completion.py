"""The transaction coordinator's completion after EndTxn (broker/partitions/kafka_clients/transactions.py), on a
real SQLite metadata database: EndTxn is answered once the decision is stored, before any marker; the next
transaction's AddPartitionsToTxn waits until every marker of the previous one is written; a completion with no
offsets is stored by the next write, and a coordinator that restarts before that (a new instance over the same
metadata) finds the decision and writes the markers again; a commit's offsets move in the same write as the
completion.

The markers are recorded by a writer function standing in for TxnMarkers (which the Kafka tests exercise against
real partitions): what is checked here is the order of the coordinator's steps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.metadata import MetadataClient
from broker.partitions.kafka_clients import group_offsets, transactions

TID = "tx-completion"


class Markers:
    """A marker writer that records each call and can be held until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[str, int]], int, int, bool]] = []
        self.seqs: list[int] = []  # each call's transaction number
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, partitions: list[tuple[str, int]], pid: int, epoch: int, commit: bool, seq: int = 0
                 ) -> dict[tuple[str, int], str]:
        self.entered.set()
        assert self.gate.wait(30), "the test never released the markers"
        self.calls.append((list(partitions), pid, epoch, commit))
        self.seqs.append(seq)
        return {}


# every coordinator a test makes, with the metadata client it reads: closed (its completion threads stopped)
# before that client is, or a completion thread still reading it crashes the interpreter
_made: list[tuple[MetadataClient, transactions.TransactionCoordinator]] = []


def _close_coordinators_of(meta: MetadataClient) -> None:
    for m, c in [mc for mc in _made if mc[0] is meta]:
        _made.remove((m, c))
        c.close()


@pytest.fixture
def meta(tmp_path: Path) -> Iterator[MetadataClient]:
    m = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0)
    try:
        yield m
    finally:
        try:
            _close_coordinators_of(m)
        finally:
            m.close()


def coordinator(meta: MetadataClient, markers: Markers,
                now: Callable[[], int] = lambda: int(time.time() * 1000)) -> transactions.TransactionCoordinator:
    c = transactions.TransactionCoordinator(meta, 0, markers, now)
    _made.append((meta, c))
    return c


def stored(meta: MetadataClient) -> transactions.TxnState:
    raw = meta.kv_get(transactions.PREFIX + TID)
    assert raw is not None
    return transactions.TxnState.decode(raw)


def test_end_txn_answers_before_the_markers_and_the_next_transaction_waits_for_them(meta: MetadataClient) -> None:
    markers = Markers()
    coord = coordinator(meta, markers)
    _, pid, epoch = coord.init_producer_id(TID, 60_000)
    assert coord.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)]) == transactions.NONE
    markers.gate.clear()
    assert coord.end_txn(TID, pid, epoch, commit=True) == transactions.NONE  # answered with the markers held
    assert markers.entered.wait(10) and markers.calls == []
    assert stored(meta).state == transactions.PREPARE_COMMIT

    answer: list[str] = []
    nxt = threading.Thread(target=lambda: answer.append(coord.add_partitions(TID, pid, epoch, [("t", 2)])))
    nxt.start()
    nxt.join(0.5)
    assert nxt.is_alive() and answer == []  # the next transaction waits for the previous markers
    markers.gate.set()
    nxt.join(30)
    assert answer == [transactions.NONE]
    assert markers.calls == [([("t", 0), ("t", 1)], pid, epoch, True)]
    st = stored(meta)  # the next transaction's write stored the completion with it
    assert (st.state, st.partitions) == (transactions.ONGOING, [("t", 2)])


def test_a_restarted_coordinator_writes_the_markers_of_a_stored_decision_again(meta: MetadataClient,
                                                                             tmp_path: Path) -> None:
    markers = Markers()
    coord = coordinator(meta, markers)
    _, pid, epoch = coord.init_producer_id(TID, 60_000)
    coord.add_partitions(TID, pid, epoch, [("t", 0)])
    assert coord.end_txn(TID, pid, epoch, commit=False) == transactions.NONE
    coord._settle(TID)
    assert markers.calls == [([("t", 0)], pid, epoch, False)]
    assert stored(meta).state == transactions.PREPARE_ABORT  # completed in memory only
    assert coord.load(TID) is not None and coord.load(TID).state == transactions.COMPLETE_ABORT  # type: ignore[union-attr]

    again = Markers()  # the coordinator restarted: a new instance over the same metadata
    with _opened(tmp_path) as other:
        restarted = coordinator(other, again)
        assert restarted.tick(lambda _tid: True) == 1
        # written again, with the transaction's number: a partition that has it durable skips it
        assert again.calls == [([("t", 0)], pid, epoch, False)]
        assert again.seqs == markers.seqs == [stored(other).seq]
        # the decision declared its partitions for the producer's next transaction, which may have begun from the
        # killed coordinator's memory: Ongoing over them, ended by the producer, InitProducerId or its timeout
        st = stored(other)
        assert (st.state, st.partitions, st.next) == (transactions.ONGOING, [("t", 0)], [])
        assert restarted.end_txn(TID, pid, epoch, commit=False) == transactions.NONE  # a retry of that EndTxn


def test_a_commit_moves_its_offsets_with_the_completion(meta: MetadataClient) -> None:
    markers = Markers()
    coord = coordinator(meta, markers)
    _, pid, epoch = coord.init_producer_id(TID, 60_000)
    coord.add_partitions(TID, pid, epoch, [("t", 0)])
    assert coord.add_offsets(TID, pid, epoch, "g") == transactions.NONE
    assert coord.txn_offset_commit(TID, pid, epoch, "g", {("in", 0): (5, "m")}) == transactions.NONE
    assert transactions.pending_offsets(meta, "g") == {("in", 0)}
    assert group_offsets.fetch(meta, "g") == {}
    coord.end_txn(TID, pid, epoch, commit=True)
    coord._settle(TID)
    assert group_offsets.fetch(meta, "g") == {("in", 0): (5, "m")}
    assert transactions.pending_offsets(meta, "g") == set()
    assert stored(meta).state == transactions.COMPLETE_COMMIT  # stored with the offsets, in one write


class Writes:
    """Counts the coordinator's metadata writes (each one an SQLite commit with its fsync)."""

    def __init__(self, meta: MetadataClient, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in ("kv_put", "kv_update"):
            real = getattr(meta, name)

            def counted(*args: object, _real: Any = real) -> Any:
                self.count += 1
                return _real(*args)

            monkeypatch.setattr(meta, name, counted)


def test_one_metadata_write_per_transaction_over_the_partitions_of_the_last(meta: MetadataClient,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    markers = Markers()
    coord = coordinator(meta, markers)
    _, pid, epoch = coord.init_producer_id(TID, 60_000)
    writes = Writes(meta, monkeypatch)
    coord.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)])
    coord.end_txn(TID, pid, epoch, commit=True)
    assert writes.count == 2  # the first transaction stores its partitions, then its decision
    for n in range(3):  # the same partitions again (in two requests, as clients send them): only the decision
        assert coord.add_partitions(TID, pid, epoch, [("t", 1)]) == transactions.NONE
        assert coord.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)]) == transactions.NONE
        assert coord.end_txn(TID, pid, epoch, commit=n != 1) == transactions.NONE
        assert writes.count == 3 + n
        st = stored(meta)
        assert (st.state, st.seq, st.next) == (transactions.PREPARE_ABORT if n == 1 else transactions.PREPARE_COMMIT,
                                               2 + n, [("t", 1), ("t", 0)])
    coord._settle(TID)
    assert markers.seqs == [1, 2, 3, 4] and [c[3] for c in markers.calls] == [True, True, False, True]
    assert coord.add_partitions(TID, pid, epoch, [("t", 1), ("t", 2)]) == transactions.NONE  # (t, 2) is new
    assert writes.count == 6
    st = stored(meta)
    assert (st.state, st.partitions, st.next) == (transactions.ONGOING, [("t", 1), ("t", 2)], [])


def test_a_transaction_begun_from_memory_is_ended_after_its_coordinator_restarts(meta: MetadataClient,
                                                                                tmp_path: Path) -> None:
    markers = Markers()
    coord = coordinator(meta, markers)
    _, pid, epoch = coord.init_producer_id(TID, 60_000)
    coord.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)])
    coord.end_txn(TID, pid, epoch, commit=True)
    assert coord.add_partitions(TID, pid, epoch, [("t", 0)]) == transactions.NONE  # begun from memory only
    assert stored(meta).state == transactions.PREPARE_COMMIT

    for commit in (True, False):  # the producer commits it, or a new incarnation aborts it
        again = Markers()  # the coordinator killed: a new instance over the same metadata
        with _opened(tmp_path) as other:
            restarted = coordinator(other, again)
            if commit:
                assert restarted.end_txn(TID, pid, epoch, commit=True) == transactions.NONE
                restarted._settle(TID)
                # transaction 1's markers again (skipped where durable), then transaction 2's over what was declared
                assert again.calls == [([("t", 0), ("t", 1)], pid, epoch, True)] * 2
                assert again.seqs == [1, 2]
                assert restarted.add_partitions(TID, pid, epoch, [("t", 1)]) == transactions.NONE
            else:
                _, pid2, epoch2 = restarted.init_producer_id(TID, 60_000)
                assert (pid2, epoch2) == (pid, epoch + 2)  # one bump fencing the open transaction, one for the new
                # transaction 2's markers again (the first restart's memory is gone too), then transaction 3 (begun
                # from that memory) aborted over what was declared, fencing the old epoch
                assert again.calls == [([("t", 0), ("t", 1)], pid, epoch, True),
                                       ([("t", 0), ("t", 1)], pid, epoch + 1, False)]
                assert again.seqs == [2, 3]
                assert stored(other).state == transactions.EMPTY


def test_an_idle_producers_completion_is_stored_without_a_next_transaction(meta: MetadataClient) -> None:
    now = [1_000_000]
    markers = Markers()
    coord = coordinator(meta, markers, lambda: now[0])
    _, pid, epoch = coord.init_producer_id(TID, 60_000)
    coord.add_partitions(TID, pid, epoch, [("t", 0)])
    coord.end_txn(TID, pid, epoch, commit=True)
    coord._settle(TID)
    coord.tick(lambda _tid: True)
    assert stored(meta).state == transactions.PREPARE_COMMIT  # kept in memory for up to a second
    now[0] += transactions.UNSTORED_MS
    coord.tick(lambda _tid: True)
    st = stored(meta)
    assert (st.state, st.next) == (transactions.COMPLETE_COMMIT, [])
    now[0] += 10 * 60_000  # long after: nothing to time out, the producer goes on unfenced
    assert coord.tick(lambda _tid: True) == 0
    assert coord.add_partitions(TID, pid, epoch, [("t", 0)]) == transactions.NONE
    assert stored(meta).state == transactions.ONGOING


class _opened:
    """A second MetadataClient over the same database, closed at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.client = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0)

    def __enter__(self) -> MetadataClient:
        return self.client

    def __exit__(self, *exc: object) -> None:
        try:
            _close_coordinators_of(self.client)
        finally:
            self.client.close()
