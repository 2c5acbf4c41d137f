"""Index claims: what a node's index holds only locally, as another node reads it from the metadata after
the node is gone (a real IndexService on disk and a real SQLite metadata log)."""

from __future__ import annotations

from pathlib import Path

from broker.metadata.client import MetadataClient
from broker.partitions.index_claims import IndexClaims, read_claims
from index_file import IndexEntry
from index_service import IndexService


def _entries(partition: int, start: int, end: int) -> list[IndexEntry]:
    return [IndexEntry("orders", partition, o, 10, 1_000 + o, [f"k{o % 7}"]) for o in range(start, end)]


def _published(index: IndexService) -> set[str]:
    return {f.location for f in index.files() if f.state.value == "UPLOADED"}


def test_claims_cover_what_is_local_and_follow_uploads_and_hand_offs(tmp_path: Path) -> None:
    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0)
    meta.register_node()
    index = IndexService.open(tmp_path / "index", store=f"file://{tmp_path}/store", maintain_interval_s=0)
    other = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 1)  # what a survivor reads
    try:
        claims = IndexClaims(meta, 0)
        put = claims.guard(index.put_batch)
        put(_entries(0, 0, 50))
        put(_entries(1, 10, 20))
        # claimed before the index has them, from the first offset of each partition
        assert {(c.topic, c.partition, c.lo, c.last) for c in read_claims(other, 0)} == {
            ("orders", 0, 0, None), ("orders", 1, 10, None)}
        index.flush()

        ranges = index.offset_ranges()  # nothing uploaded yet: the claims stay where they are
        claims.narrow(ranges, _published(index))
        assert {(c.partition, c.lo) for c in read_claims(other, 0)} == {(0, 0), (1, 10)}

        index.roll()
        index.maintain()
        ranges = index.offset_ranges()
        assert _published(index)
        claims.narrow(ranges, set())  # uploaded but not published: nobody reads those files, the claims stay
        assert {(c.partition, c.lo) for c in read_claims(other, 0)} == {(0, 0), (1, 10)}
        claims.narrow(ranges, _published(index))  # published: past the highest uploaded offset
        assert {(c.partition, c.lo) for c in read_claims(other, 0)} == {(0, 50), (1, 20)}

        put(_entries(0, 50, 60))
        claims.release("orders", 1, 19)  # handed over with everything of it uploaded: dropped at the next pass
        claims.release("orders", 0, 59)
        index.flush()
        claims.narrow(index.offset_ranges(), _published(index))
        assert {(c.partition, c.lo, c.last) for c in read_claims(other, 0)} == {(0, 50, 59)}

        put(_entries(0, 80, 85))  # the partition came back: claimed again from its earliest local offset
        assert {(c.partition, c.lo, c.last) for c in read_claims(other, 0)} == {(0, 50, None)}
    finally:
        index.close()
        meta.close()
        other.close()


def test_a_claim_not_stored_while_the_metadata_does_not_answer_is_stored_when_it_does(tmp_path: Path) -> None:
    """The metadata database ended the connection under a claim's store (a real SQLite log whose writes fail for
    a while): the dispatcher thread does not die, it puts the batch again once the metadata answers, and the
    claim the failed store would have made is stored then (it was not taken as made)."""
    from broker.errors import MetadataUnavailable
    from broker.partitions.dispatcher import Dispatcher

    meta = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 0)
    meta.register_node()
    index = IndexService.open(tmp_path / "index", store=f"file://{tmp_path}/store", maintain_interval_s=0)
    other = MetadataClient(f"sqlite:///{tmp_path}/meta.sqlite", 1)
    failures = [3]  # the next three metadata writes fail
    write = meta._txn

    def flaky(build):  # type: ignore[no-untyped-def]
        if failures[0]:
            failures[0] -= 1
            raise MetadataUnavailable("terminating connection due to administrator command")
        return write(build)

    meta._txn = flaky  # type: ignore[method-assign]
    claims = IndexClaims(meta, 0)
    d = Dispatcher(claims.guard(index.put_batch), lambda c: iter(()), index.flush)
    d.start([])
    try:
        d.enqueue(_entries(0, 0, 40))
        d.wait_idle(30)
        assert d.error is None and failures == [0]
        assert {(c.topic, c.partition, c.lo, c.last) for c in read_claims(other, 0)} == {("orders", 0, 0, None)}
        assert sorted(h.offset for h in index.query("orders", "k3", 100)) == [o for o in range(40) if o % 7 == 3]
    finally:
        d.stop()
        index.close()
        meta.close()
        other.close()
