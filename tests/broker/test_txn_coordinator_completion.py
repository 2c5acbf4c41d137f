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
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metadata import MetadataClient
from broker.partitions.kafka_clients import group_offsets, transactions

TID = "tx-completion"


class Markers:
    """A marker writer that records each call and can be held until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[tuple[str, int]], int, int, bool]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, partitions: list[tuple[str, int]], pid: int, epoch: int, commit: bool
                 ) -> dict[tuple[str, int], str]:
        self.entered.set()
        assert self.gate.wait(30), "the test never released the markers"
        self.calls.append((list(partitions), pid, epoch, commit))
        return {}


@pytest.fixture
def meta(tmp_path: Path) -> Iterator[MetadataClient]:
    m = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0)
    try:
        yield m
    finally:
        m.close()


def coordinator(meta: MetadataClient, markers: Markers) -> transactions.TransactionCoordinator:
    return transactions.TransactionCoordinator(meta, 0, markers, lambda: int(time.time() * 1000))


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
        assert again.calls == [([("t", 0)], pid, epoch, False)]  # written again: a second marker changes nothing
        assert stored(other).state == transactions.COMPLETE_ABORT
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


class _opened:
    """A second MetadataClient over the same database, closed at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.client = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0)

    def __enter__(self) -> MetadataClient:
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.close()
