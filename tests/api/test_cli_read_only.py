"""Read-only commands never create state: a scrub in the wrong folder, of a missing store or metadata database, or
of a metadata database that holds nothing says so and exits non-zero; nothing appears on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.api.server import ServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MQINDEX_DATA_DIR"}
    return subprocess.run([MQINDEX, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_scrub_in_the_wrong_folder_says_so_and_creates_nothing(tmp_path: Path) -> None:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    r = run(cwd, "scrub")
    assert r.returncode == 1, r.stdout
    assert r.stdout == "" and "0 damaged" not in r.stderr
    assert "no data directory at" in r.stderr and str(cwd / "data") in r.stderr
    assert "--data-dir" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run(cwd, "scrub", "--data-dir", str(tmp_path / "missing"))
    assert r.returncode == 1 and "no data directory at" in r.stderr and "(--data-dir)" in r.stderr
    r = run(cwd, "scrub", "--metadata", f"sqlite:///{tmp_path}/meta.sqlite", "--store", f"file://{tmp_path}/objects")
    assert r.returncode == 1 and f"no metadata database at {tmp_path}/meta.sqlite (--metadata)" in r.stderr
    empty_data = cwd / "empty"
    empty_data.mkdir()
    r = run(cwd, "scrub", "--data-dir", str(empty_data))
    assert r.returncode == 1 and f"no metadata database at {empty_data}/metadata.sqlite" in r.stderr
    assert tree(tmp_path) == ["elsewhere", "elsewhere/empty"]


def test_inspect_with_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    for cmd in ("inspect-object", "inspect-index"):
        r = run(tmp_path, cmd, "some/key", "--store", f"file://{tmp_path}/objects")
        assert r.returncode == 1 and f"no store directory at {tmp_path}/objects (--store)" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    r = run(tmp_path, "inspect-index", "missing.idx")
    assert r.returncode == 1 and r.stderr.strip() == ("mqindex inspect-index: no such index file 'missing.idx' "
                                                      "(give --store URL to read a key from a store)")
    assert tree(tmp_path) == []


def test_scrub_of_an_empty_metadata_database_says_so(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, "--kafka-listener", "").start()
    try:
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        for args in (("topics", "list"), ("nodes",), ("compact",), ("query", "t", "k")):
            r = run(cwd, *args, "--url", server.url)
            assert r.returncode in (0, 1), r.stderr
        assert tree(cwd) == []  # the client commands write nothing where they run
    finally:
        assert server.stop() == 0
    r = run(tmp_path, "scrub", "--data-dir", str(data))
    assert r.returncode == 1 and "0 damaged" not in r.stdout
    assert "holds no topics and no objects: nothing to scrub" in r.stderr, r.stderr
