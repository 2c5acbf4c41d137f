"""The WAL on a full filesystem (a real 8 MiB tmpfs): a refused group commit is an episode, not the end.

Nothing refused is acknowledged, a torn write is cut at once, appends are refused while it lasts, and after
space returns `resume()` checks the tail and the offsets go on from the acknowledged end."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.errors import OutOfDisk, WalError
from broker.streams import wal as wal_module
from broker.streams.wal import Wal, scan
from tests.disk_fs import fill, free, small_tmpfs


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "fs", 8) as mnt:
        yield mnt


def _segment_bytes(wal_dir: Path) -> int:
    return sum(p.stat().st_size for p in wal_dir.glob("*.wal"))


def test_enospc_pauses_cuts_the_torn_write_and_resumes(fs: Path) -> None:
    wal = Wal.open(fs / "wal")
    try:
        acked = [wal.append(b"a%03d" % i * 1000) for i in range(20)]
        end = acked[-1].next_offset
        filler = fs / "filler"
        fill(filler, leave=300_000)  # room for part of the next write only: it is torn by ENOSPC
        with pytest.raises(OutOfDisk) as err:
            wal.append(os.urandom(1 << 20))
        assert str(fs / "wal") in str(err.value) and err.value.kafka_error_code == 56
        assert wal.paused is not None and wal.episodes == 1
        assert _segment_bytes(fs / "wal") == end  # the torn bytes are gone already
        with pytest.raises(OutOfDisk):  # refused at once while the episode lasts
            wal.append_async(b"x")
        assert not wal.resume() or free(fs) > 0  # resume may run now; it must not lose anything either way
        filler.unlink()
        assert wal.resume() and wal.paused is None
        after = wal.append(b"after")
        assert after.offset == end  # the refused record's WAL offsets are used again
    finally:
        wal.close()
    records, report = scan(fs / "wal")
    assert [r.body for r in records] == [b"a%03d" % i * 1000 for i in range(20)] + [b"after"]
    assert report.stop_reason == ""


def test_every_append_queued_behind_a_refused_one_fails_and_none_is_written(fs: Path) -> None:
    wal = Wal.open(fs / "wal")
    try:
        first = wal.append(b"first")
        fill(fs / "filler")
        outcomes = []
        futures = []
        for _ in range(5):
            try:
                futures.append(wal.append_async(os.urandom(200_000)))
            except OutOfDisk:  # the writer already failed a group: refused before it is queued
                futures.append(None)
        for f in futures:
            try:
                outcomes.append(None if f is None else f.result(30))
            except OutOfDisk:
                outcomes.append(None)
        assert None in outcomes
        # once one fails, every later one fails too: acknowledged records form a prefix
        assert all(o is None for o in outcomes[outcomes.index(None):])
        kept = [o for o in outcomes if o is not None]
        end = kept[-1].next_offset if kept else first.next_offset
        assert _segment_bytes(fs / "wal") == end
        (fs / "filler").unlink()
        assert wal.resume()
        assert wal.append(b"again").offset == end
    finally:
        wal.close()
    records, report = scan(fs / "wal")
    assert len(records) == 2 + len(kept) and records[-1].body == b"again" and report.stop_reason == ""


def test_resume_waits_until_every_refused_append_is_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The appends of a refused group commit are failed one by one, and each one's callback rolls its stream
    back. Space may be back before the last is told (EDQUOT, or another process freed room): resume() refuses
    until then, or an append could be queued at an offset that its stream's rollback then takes back."""
    real = os.fdatasync
    refuse = threading.Event()

    def fdatasync(fd: int) -> None:
        if refuse.is_set() and threading.current_thread().name.startswith("wal-writer"):
            refuse.clear()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(wal_module.os, "fdatasync", fdatasync)
    wal = Wal.open(tmp_path / "wal")
    try:
        before = wal.append(b"before")
        telling, told = threading.Event(), threading.Event()

        def slow_rollback(_f: object) -> None:  # a stream's rollback, still running
            telling.set()
            assert told.wait(30)

        refuse.set()
        first = wal.append_async(b"refused 1")
        first.add_done_callback(slow_rollback)
        second = wal.append_async(b"refused 2")
        assert telling.wait(30), "the refused group commit was never told"
        assert not wal.resume(), "resumed while a refused append was still being told"
        told.set()
        with pytest.raises(OutOfDisk):
            second.result(30)
        assert wal.resume() and wal.paused is None
        assert wal.append(b"after").offset == before.next_offset  # the refused records' offsets are used again
    finally:
        told.set()
        wal.close()
    records, _ = scan(tmp_path / "wal")
    assert [r.body for r in records] == [b"before", b"after"]


def test_a_tail_that_cannot_be_cut_still_tells_every_waiter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of disk, the WAL cuts its torn tail; when the tail does not scan cleanly the WAL fails for good, and
    every append of the refused group commit and queued behind it is still told (none waits forever)."""
    wal = Wal.open(tmp_path / "wal")
    try:
        wal.append(b"before")
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            if threading.current_thread().name.startswith("wal-writer"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(fd)

        def tail_damaged() -> None:
            raise WalError(f"WAL {wal.directory}: tail does not scan cleanly to the acknowledged end")

        monkeypatch.setattr(wal_module.os, "fdatasync", fdatasync)
        monkeypatch.setattr(wal, "_cut_tail", tail_damaged)
        waiting = [wal.append_async(b"refused %d" % i) for i in range(3)]
        for f in waiting:
            with pytest.raises(OutOfDisk):
                f.result(30)
    finally:
        monkeypatch.undo()
        wal.close()
