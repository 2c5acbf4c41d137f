"""The index writer on a full filesystem (a real 16 MiB tmpfs): out of disk is waited out, not fatal.

Writes that hit ENOSPC keep their records buffered, `flush()` says why instead of hanging, queries answer
from what is written, and once space returns the writer catches up by itself with nothing lost or doubled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from index_service import IndexOutOfSpace
from tests.disk_fs import fill, small_tmpfs
from tests.index_service.helpers import ManualClock, open_service


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "fs", 16) as mnt:
        yield mnt


def test_enospc_is_waited_out_and_queries_go_on(fs: Path) -> None:
    clock = ManualClock()
    svc = open_service(fs / "index", None, clock, slots=4096, max_items=400_000)
    try:
        svc.put_batch([("t", 0, i, 10, clock(), [f"k{i}"]) for i in range(100)])
        svc.flush()
        fill(fs / "filler")  # nothing left: the next items cannot be allocated
        svc.put_batch([("t", 0, i, 10, clock(), [f"k{i}"]) for i in range(100, 300_000)])
        with pytest.raises(IndexOutOfSpace, match="No space left"):
            svc.flush(30)
        assert svc.writer.blocked is not None and svc.writer.error is None
        assert [h.offset for h in svc.query("t", "k7")] == [7]  # queries go on
        (fs / "filler").unlink()
        svc.flush(60)  # resumed by itself
        assert svc.writer.blocked is None
        for i in (0, 99, 100, 150_000, 299_999):
            assert [h.offset for h in svc.query("t", f"k{i}")] == [i]
    finally:
        svc.close()
