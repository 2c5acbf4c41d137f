"""An index file of a version newer than this version of mqindex reads (a node downgraded after writing it, or a
file written by a later release) is not damage: the service does not open, with an error naming the file and both
versions, and the file is left where it is (never quarantined, never cut). Today's files (version 1) open."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from index_file.errors import NewerFormat
from index_service import FileState
from tests.index_service.helpers import ManualClock, open_service


def rewrite_version(path: Path, version: int) -> bytes:
    """The file's header version (little-endian u16 at byte 4) set to `version`, its header CRC32C (over the
    first 60 bytes, at byte 60) made to match: a header a later release would write."""
    out = bytearray(path.read_bytes())
    struct.pack_into("<H", out, 4, version)
    struct.pack_into("<I", out, 60, crc32c.crc32c(bytes(out[:60])))
    path.write_bytes(bytes(out))
    return bytes(out)


@pytest.mark.parametrize("state", [FileState.COMPACTED, FileState.WRITING])
def test_a_newer_index_file_stops_the_open_and_stays_in_place(tmp_path: Path, state: FileState) -> None:
    clock = ManualClock()
    url = f"file://{tmp_path}/blobs"
    svc = open_service(tmp_path / "idx", url, clock)
    for i in range(45):  # files: [0..19] [20..39] and a WRITING one with 40..44
        svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
    svc.flush()
    svc.lifecycle.compact(svc.files_map.by_state(FileState.SEALED)[0])
    target = next(f for f in svc.files() if f.state == state)
    svc.close()
    svc = open_service(tmp_path / "idx", url, clock)  # today's files, version 1, open as they are
    assert [h.offset for h in svc.query("t", "k42", 5)] == [42]
    svc.close()

    path = Path(target.location)
    newer = rewrite_version(path, 2)
    with pytest.raises(NewerFormat, match=rf"{path.name}: index file check 'version' failed: version 2, newer than "
                                          r"this version of mqindex reads \(1\)"):
        open_service(tmp_path / "idx", url, clock)
    assert path.read_bytes() == newer and not any((tmp_path / "idx" / "quarantine").iterdir())
    rewrite_version(path, 1)  # the same file as version 1 (an upgraded node) opens with its items
    svc = open_service(tmp_path / "idx", url, clock)
    try:
        assert [h.offset for h in svc.query("t", "k5" if state == FileState.COMPACTED else "k42", 5)] == \
            [5 if state == FileState.COMPACTED else 42]
    finally:
        svc.close()
