"""The shared WAL (WAL objects in a store) after a trim cut short: a delete that failed, or a crash in the middle
of one, leaves trimmed objects in the store below a gap. The records above the gap are the ones not yet
committed to objects, so recovery and a survivor's replay must find every one of them; the objects left below
are deleted by a later trim. The store is a real local directory; the fault is a delete refused once."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.streams.object_wal import ObjectWal, read_wal, wal_prefix
from storage_tier.errors import StorageUnavailable
from storage_tier.local_store import LocalStore


class DeleteRefusedOnce(LocalStore):
    """A local store whose next delete fails (as S3 answers a DeleteObjects it could not carry out)."""

    refuse = False

    def _delete(self, keys: list[str]) -> None:
        if self.refuse:
            self.refuse = False
            raise StorageUnavailable(self.name, keys[0], "delete refused")
        super()._delete(keys)


def store_at(tmp_path: Path) -> DeleteRefusedOnce:
    return DeleteRefusedOnce(f"file://{tmp_path / 'store'}", tmp_path / "store")


def bodies(n: int) -> list[bytes]:
    return [f"record-{i}:".encode() + b"x" * (50 + i) for i in range(n)]


def wal_keys(store: LocalStore) -> list[str]:
    return store.list(wal_prefix(0))


def test_a_failed_delete_is_done_by_the_next_trim_and_every_record_above_is_replayed(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    wal = ObjectWal.open(store, 0)
    try:
        written = bodies(5)
        acked = [wal.append(b) for b in written]  # one object each
        store.refuse = True
        with pytest.raises(StorageUnavailable):
            wal.trim(acked[1].next_offset)
        assert len(wal_keys(store)) == 5  # nothing deleted, nothing forgotten
        wal.trim(acked[3].next_offset)
        assert len(wal_keys(store)) == 1  # the objects the failed trim left are deleted too
    finally:
        wal.close()
    records, report, _ = read_wal(store, 0)
    assert [r.body for r in records] == written[4:] and report.stop_reason == ""


def test_objects_left_below_a_gap_do_not_hide_the_records_above_it(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    wal = ObjectWal.open(store, 0)
    try:
        written = bodies(6)
        acked = [wal.append(b) for b in written]
    finally:
        wal.close()
    # a trim to the end of the fourth object cut short: only the second object was deleted
    keys = wal_keys(store)
    store.delete(keys[1])
    records, report, spans = read_wal(store, 0)
    assert [r.body for r in records] == written[2:], "records above the gap were not replayed"
    assert report.trim_offset == acked[2].offset and report.end_offset == acked[5].next_offset
    assert report.stop_reason == ""
    assert sorted(k for _, _, k in spans) == sorted(keys[:1] + keys[2:])  # every object, to delete later
    wal = ObjectWal.open(store, 0)  # the node restarts on its shared WAL
    try:
        assert [r.body for r in wal.recovered] == written[2:]
        later = wal.append(b"after the restart")
        assert later.offset == acked[5].next_offset
        wal.trim(acked[3].next_offset)  # the next trim also deletes the object left below the gap
        assert wal_keys(store) == keys[4:] + [f"{wal_prefix(0)}{later.offset:020d}"]
    finally:
        wal.close()
    records, report, _ = read_wal(store, 0)
    assert [r.body for r in records] == [*written[4:], b"after the restart"]


class TrimmedWhileRead(LocalStore):
    """A local store where a survivor trims the WAL from the oldest object while a restarting node reads it: the
    first get of a listed object finds the oldest objects, that one included, deleted (as a survivor that
    fenced the node and replayed its WAL does, racing the node's restart)."""

    trim_upto: str | None = None

    def _get(self, key: str, start: int, end: int | None) -> bytes:
        if self.trim_upto is not None and key == self.trim_upto:
            upto, self.trim_upto = self.trim_upto, None
            self.delete([k for k in self.list(wal_prefix(0)) if k <= upto])
        return super()._get(key, start, end)


def test_objects_deleted_while_the_wal_is_read_are_read_again_from_a_new_listing(tmp_path: Path) -> None:
    store = TrimmedWhileRead(f"file://{tmp_path / 'store'}", tmp_path / "store")
    wal = ObjectWal.open(store, 0)
    try:
        written = bodies(5)
        for b in written:
            wal.append(b)  # one object each
    finally:
        wal.close()
    keys = wal_keys(store)
    store.trim_upto = keys[2]  # the restart lists five objects; the third is gone when it is read
    records, report, spans = read_wal(store, 0)
    assert [r.body for r in records] == written[3:] and report.stop_reason == ""
    assert sorted(k for _, _, k in spans) == keys[3:]
