"""Recovery of a writing index file on a full filesystem (a real 8 MiB tmpfs): the file opens, its items are
all kept and answer, and nothing is stored into or read from the never-written part of the file through the
mapping (on tmpfs a fault on a hole allocates a page, and on a full one that is a SIGBUS killing the node at
"index recovery started")."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.disk_fs import run_child_once_full, small_tmpfs

# Runs in a child process: a SIGBUS kills it, which the test reports as such instead of losing the test run.
CHILD = textwrap.dedent("""
    import sys
    from index_file import IndexEntry, NativeIndexWriter
    path = sys.argv[1]
    es = [IndexEntry("t", i % 4, i, 100, 1_700_000_000_000 + i, (f"k{i}",)) for i in range(5_000)]
    w = NativeIndexWriter.create(path, 1_700_000_000_000, slots=4096, max_items=200_000)
    assert w.put_batch(es) == len(es)
    w.sync()
    w.close()  # not sealed: the next open recovers it
    print("READY", flush=True)
    sys.stdin.readline()  # the filesystem is filled meanwhile
    w = NativeIndexWriter.open(path, writable=True)
    print("OPENED", w.item_count, w.torn_items, flush=True)
    hits = w.query("t", "k4321", 10)
    print("HITS", len(hits), hits[0].offset if hits else -1, flush=True)
""")


def test_a_writing_file_recovers_on_a_full_filesystem(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "fs", 8) as mnt:
        path = mnt / "w.idx"  # 200,000 items of room (sparse), 5,000 written
        rc, out, err = run_child_once_full(CHILD, [str(path)], mnt, max_free=64 << 10)
        assert rc == 0, f"recovery child died (rc={rc}): {err}"
        assert out.split() == ["OPENED", "5000", "0", "HITS", "1", "4321"], (out, err)
