"""An out-of-disk episode begun by a write refused just above the floor lasts until that write would fit: the
poll does not end it (and the next write begin it again) while the free space sits between the floor and the
floor plus the refused write. Real tmpfs mount."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import OutOfDisk
from broker.streams.disk_space import DiskSpace
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
