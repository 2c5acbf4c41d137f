"""An out-of-disk episode begun by a write refused just above the floor lasts until that write would fit: the
poll does not end it (and the next write begin it again) while the free space sits between the floor and the
floor plus the refused write. Real tmpfs mount."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.errors import OutOfDisk
from broker.streams import disk_space
from broker.streams.disk_space import DiskSpace
from storage_tier.disk_space import free_bytes as real_free
from tests.disk_fs import fill, free, small_tmpfs

FLOOR = 2 << 20
WRITE = 1 << 20


def test_refused_write_keeps_the_episode_until_it_fits(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "fs", 16) as mnt:
        disk = DiskSpace(min_free_bytes=FLOOR)
        disk.watch("wal", mnt / "wal")
        fill(mnt / "filler", leave=FLOOR + WRITE // 2)
        left = free(mnt)
        assert FLOOR < left < FLOOR + WRITE  # above the floor, but the write would cross it
        with pytest.raises(OutOfDisk):
            disk.check_write("wal", WRITE)
        assert disk.episode is not None and disk.episodes == 1
        for _ in range(3):  # every path is above its floor, yet the refused write still does not fit
            assert disk.poll() is False
        with pytest.raises(OutOfDisk):
            disk.check_write("wal", 1)
        assert disk.episodes == 1
        (mnt / "filler").unlink()
        assert disk.poll() is True
        assert disk.episode is None and disk.resumes == 1
        disk.check_write("wal", WRITE)  # fits now


def test_writes_far_above_the_floor_share_a_reading_and_near_it_each_asks(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A recent free-space reading, less the writes checked since, serves writes that leave READING_MARGIN
    above the floor; once a reading is older than READING_FRESH_S the filesystem is asked again, and near the
    floor every write asks it, so a disk filled by another process is refused at the next write."""
    readings: list[int] = []

    def counted(path: Path) -> int:
        readings.append(real_free(path))
        return readings[-1]

    clock = [1000.0]
    monkeypatch.setattr(disk_space, "free_bytes", counted)
    monkeypatch.setattr(disk_space, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    with small_tmpfs(tmp_path / "fs", 128) as mnt:
        disk = DiskSpace(min_free_bytes=FLOOR)
        disk.watch("wal", mnt / "wal")
        for _ in range(50):
            disk.check_write("wal", 64 << 10)
        assert len(readings) == 1  # 3 MiB of writes against ~128 MiB free: one reading served them all
        # the writes checked are taken off the reading: 60 MiB more would leave it within the margin, so the
        # filesystem is asked again (nothing was written, so it has the room)
        disk.check_write("wal", 60 << 20)
        assert len(readings) == 2
        fill(mnt / "filler", leave=FLOOR + disk_space.READING_MARGIN // 2)
        disk.check_write("wal", 64 << 10)
        assert len(readings) == 2  # within the reading's time the filler is not seen yet
        clock[0] += 2 * disk_space.READING_FRESH_S
        disk.check_write("wal", 64 << 10)
        assert len(readings) == 3 and readings[-1] < FLOOR + disk_space.READING_MARGIN
        for n in range(3):  # near the floor: each write asks the filesystem
            disk.check_write("wal", 64 << 10)
            assert len(readings) == 4 + n
        with pytest.raises(OutOfDisk):
            disk.check_write("wal", free(mnt) - FLOOR + 1)
        assert disk.episode is not None and disk.episode.path == str(mnt / "wal")
