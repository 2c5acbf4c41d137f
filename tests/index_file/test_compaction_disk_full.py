"""Compaction onto a full filesystem (a real 8 MiB tmpfs): an OSError(ENOSPC) the caller can wait out, no
SIGBUS from a store into an unallocated page of the output mapping, no temp file left, the source intact."""

from __future__ import annotations

import errno
import textwrap
from pathlib import Path

from tests.disk_fs import run_child_once_full, small_tmpfs

# Runs in a child process: a regression to a sparse output file would kill it with SIGBUS, which the
# test reports as such instead of losing the test run.
CHILD = textwrap.dedent("""
    import errno, sys
    from index_file import IndexEntry, NativeIndexWriter, compact
    src, dst = sys.argv[1], sys.argv[2]
    es = [IndexEntry("t", i % 4, i, 100, 1_700_000_000_000 + i, (f"k{i}",)) for i in range(60_000)]
    w = NativeIndexWriter.create(src, 1_700_000_000_000, slots=4096, max_items=len(es))
    assert w.put_batch(es) == len(es)
    w.seal()
    w.close()
    print("READY", flush=True)
    sys.stdin.readline()  # the filesystem is filled meanwhile
    try:
        compact(src, dst)
    except OSError as exc:
        print("OSERROR", exc.errno, flush=True)
        sys.exit(0)
    print("WRITTEN", flush=True)
""")


def test_compaction_on_a_full_filesystem_is_an_enospc_error(tmp_path: Path) -> None:
    src = tmp_path / "src.idx"  # on the roomy disk
    with small_tmpfs(tmp_path / "fs", 8) as mnt:
        dst = mnt / "dst.cidx"
        # room for far less than the compacted file (~2.4 MB)
        rc, out, err = run_child_once_full(CHILD, [str(src), str(dst)], mnt, max_free=1 << 20, leave=64 << 10)
        assert rc == 0, f"compaction child died (rc={rc}): {err}"
        assert out.split() == ["OSERROR", str(errno.ENOSPC)], (out, err)
        assert sorted(p.name for p in mnt.iterdir()) == ["ballast"]  # no temp file, no half-written output
    # the source is untouched: it still compacts once there is room
    from index_file import compact

    stats = compact(src, tmp_path / "dst.cidx")
    assert stats is not None and (tmp_path / "dst.cidx").stat().st_size > 1 << 20
