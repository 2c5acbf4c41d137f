"""The aborted transactions a read_committed fetch lists (PartitionTxns.aborted_in): exactly those with records in
the fetched range, found by looking at the range (plus the longest aborted transaction) rather than at every
transaction the partition aborted after it, so a fetch costs the same whatever the history behind or ahead of it.
The entries looked at are counted on the state's own list (a binary search's probes aside)."""

from __future__ import annotations

from typing import Any, SupportsIndex

from broker.partitions.kafka_clients.txn_partition import CONTROL, TRANSACTIONAL, PartitionTxns


class Counted(list[tuple[int, int, int]]):
    """The aborted list, counting the entries read from it."""

    read = 0

    def __getitem__(self, i: SupportsIndex | slice) -> Any:
        got = super().__getitem__(i)
        Counted.read += len(got) if isinstance(i, slice) else 1
        return got


def history(aborts: int) -> PartitionTxns:
    """Producer 1 aborts `aborts` transactions of 2 records each (offsets 3k, 3k+1, marker 3k+2); producer 2 has
    one long aborted transaction from offset 100 to its marker at 3 * aborts."""
    st = PartitionTxns()
    st.on_batch(TRANSACTIONAL, 2, 100)
    for k in range(aborts):
        st.on_batch(TRANSACTIONAL, 1, 3 * k)
        st.on_batch(CONTROL | TRANSACTIONAL, 1, 3 * k + 2, commit=False)
    st.on_batch(CONTROL | TRANSACTIONAL, 2, 3 * aborts, commit=False)
    return st


def brute(st: PartitionTxns, start: int, end: int) -> list[tuple[int, int]]:
    return [(pid, first) for marker, pid, first in st.aborted if marker >= start and first < end]


def test_the_aborted_transactions_of_a_range_are_exactly_those_with_records_in_it() -> None:
    st = history(300)
    for start, end in [(0, 1), (0, 9), (5, 6), (99, 101), (100, 103), (450, 460), (898, 899), (899, 901),
                       (900, 901), (0, 901)]:
        assert st.aborted_in(start, end) == brute(st, start, end), (start, end)


def test_a_fetch_reads_the_same_few_entries_however_many_aborts_follow_it() -> None:
    reads = []
    for aborts in (1_000, 100_000):
        st = PartitionTxns()
        for k in range(aborts):
            st.on_batch(TRANSACTIONAL, 1, 3 * k)
            st.on_batch(CONTROL | TRANSACTIONAL, 1, 3 * k + 2, commit=False)
        st.aborted = Counted(st.aborted)
        Counted.read = 0
        assert st.aborted_in(30, 60) == [(1, 3 * k) for k in range(10, 20)]
        reads.append(Counted.read - (aborts.bit_length() + 1))  # less the binary search's probes
    assert max(reads) <= 12, reads  # the range's ten entries and the one after
