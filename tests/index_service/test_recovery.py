"""Recovery on open: corrupt files quarantined with a log line naming them, a torn WRITING tail cut,
counts recovered from content, stale scratch cleared, interrupted transitions finished."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from index_file.native_unsealed import items_offset
from index_service import FileState
from tests.index_service.helpers import ManualClock, open_service


def _fill(tmp_path: Path, clock: ManualClock, n: int = 50, upload: bool = True) -> str:
    url = f"file://{tmp_path}/blobs"
    svc = open_service(tmp_path / "idx", url, clock)
    for i in range(n):
        svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
    svc.flush()
    if upload:
        svc.maintain()
    svc.close()
    return url


def _quarantine_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "index file quarantined"]


def test_corrupt_files_are_quarantined_and_never_served(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    url = f"file://{tmp_path}/blobs"
    svc = open_service(tmp_path / "idx", url, clock)
    for i in range(45):  # files: [0..19] [20..39] and a WRITING one with 40..44
        svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
    svc.flush()
    for mf in svc.files_map.by_state(FileState.SEALED)[:1]:
        svc.lifecycle.compact(mf)
    states = [f.state for f in svc.files()]
    assert states == [FileState.COMPACTED, FileState.SEALED, FileState.WRITING]
    compacted, sealed, _writing = svc.files()
    svc.close()
    # flip one byte inside the compacted file's first block, and one in the sealed file's items
    for path, pos in ((compacted.location, 100), (sealed.location, items_offset(64) + 50)):
        with open(path, "r+b") as f:
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0x40]))
    (tmp_path / "idx" / "uploaded" / "0000000000000001.json").write_text('{"crc32c": 1, "body": "{}"}')
    caplog.set_level(logging.INFO, logger="mqindex")
    svc = open_service(tmp_path / "idx", url, clock)
    try:
        rec = _quarantine_records(caplog)
        named = sorted(Path(r.file).name for r in rec)  # type: ignore[attr-defined]
        assert named == sorted([Path(compacted.location).name, Path(sealed.location).name,
                                "0000000000000001.json"])
        assert all(r.levelno == logging.ERROR and r.reason for r in rec)  # type: ignore[attr-defined]
        assert len(list((tmp_path / "idx" / "quarantine").iterdir())) == 3
        assert [f.state for f in svc.files()] == [FileState.WRITING]
        assert svc.query("t", "k5", 5) == [] and svc.query("t", "k25", 5) == []
        assert [h.offset for h in svc.query("t", "k42", 5)] == [42]
    finally:
        svc.close()


def test_torn_tail_is_cut_and_counts_come_from_content(tmp_path: Path) -> None:
    clock = ManualClock()
    url = f"file://{tmp_path}/blobs"
    svc = open_service(tmp_path / "idx", url, clock, max_items=1000)
    for i in range(10):
        svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
    svc.flush()
    (writing,) = svc.files()
    svc.close()
    path = writing.location
    # garbage where item 10 and 11 would go (a torn chunk), and a stale header count cannot be trusted
    with open(path, "r+b") as f:
        f.seek(items_offset(64) + 10 * 40)
        f.write(os.urandom(80))
    svc = open_service(tmp_path / "idx", url, clock, max_items=1000)
    try:
        assert svc.recovery is not None and svc.recovery.torn_items >= 1
        (f,) = svc.files()
        assert f.items == 10 and f.state is FileState.WRITING
        svc.put("t", 0, 10, 1, ["k10"], clock.now + 10)
        svc.flush()
        for i in range(11):
            assert [h.offset for h in svc.query("t", f"k{i}", 5)] == [i]
    finally:
        svc.close()


def test_scratch_cleared_and_finished_transitions_completed(tmp_path: Path) -> None:
    clock = ManualClock()
    url = f"file://{tmp_path}/blobs"
    svc = open_service(tmp_path / "idx", url, clock)
    for i in range(25):
        svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
    svc.flush()
    (sealed_mf,) = svc.files_map.by_state(FileState.SEALED)
    stem = sealed_mf.stem
    svc.lifecycle.compact(sealed_mf)
    svc.lifecycle.upload(sealed_mf)
    svc.close()
    idx = tmp_path / "idx"
    (idx / "compacting" / "half-written.mqxc.tmp").write_bytes(b"junk")
    # put back a local compacted copy as if the process died before removing it after the upload
    from index_file import NativeIndexWriter
    from index_file import compact as compact_file
    w = NativeIndexWriter.create(idx / "compacting" / "x.mqxu", 1, 64, 20)
    w.put_batch([("t", 0, 0, 1, 1, ["z"])])
    w.seal()
    w.close()
    compact_file(idx / "compacting" / "x.mqxu", idx / "compacted" / f"{stem}.mqxc")
    svc = open_service(idx, url, clock)
    try:
        rep = svc.recovery
        assert rep is not None and rep.scratch_cleared >= 1 and rep.finished_transitions == 1
        assert list((idx / "compacting").iterdir()) == []
        assert not (idx / "compacted" / f"{stem}.mqxc").exists()
        assert [f.state for f in svc.files() if f.items] == [FileState.UPLOADED, FileState.WRITING]
        assert [h.offset for h in svc.query("t", "k3", 5)] == [3]
    finally:
        svc.close()


def test_lock_keeps_a_second_service_out(tmp_path: Path) -> None:
    svc = open_service(tmp_path / "idx", None)
    try:
        with pytest.raises(RuntimeError, match="LOCK"):
            open_service(tmp_path / "idx", None)
    finally:
        svc.close()
