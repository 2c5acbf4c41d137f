"""A power failure after a checkpoint: the WRITING file's newest own checkpoint reached the disk but an item
page written after the service's last sync did not. Recovery keeps the file back to what verifies, never
below the service checkpoint; the broker re-dispatches from that checkpoint and every record is found once.
Only a hole in the synced part quarantines the file."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from index_file.native_unsealed import ITEM_SIZE, items_offset
from index_service import FileState, IndexService
from tests.index_service.helpers import ManualClock, open_service

SLOTS = 64  # open_service's default
OPTS = {"max_items": 1000, "checkpoint_interval_ms": 600_000}  # no timed checkpoint save during the test


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.005)


def _crashed_copy(tmp_path: Path, clock: ManualClock) -> tuple[Path, str]:
    """Ten records flushed (synced, checkpointed), ten more written one batch each (queryable, each moving the
    file's own checkpoint) but not checkpointed by the service; then the data directory as a crash leaves it
    (a copy taken while the service runs). Returns the copy and the WRITING file's name."""
    svc = open_service(tmp_path / "idx", None, clock, **OPTS)
    try:
        for i in range(10):
            svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
        svc.flush()
        assert svc.checkpoint("t", 0) == 9
        for i in range(10, 20):
            svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
            _wait(lambda i=i: [h.offset for h in svc.query("t", f"k{i}")] == [i], f"k{i} written")
        assert svc.checkpoint("t", 0) == 9  # the service's checkpoint still covers the first ten only
        (writing,) = svc.files()
        crashed = tmp_path / "crashed"
        shutil.copytree(tmp_path / "idx", crashed)
    finally:
        svc.close()
    return crashed, Path(writing.location).name


def _lose_item(path: Path, index: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes(ITEM_SIZE), items_offset(SLOTS) + index * ITEM_SIZE)
    finally:
        os.close(fd)


@pytest.fixture
def reopened() -> Iterator[Callable[..., IndexService]]:
    opened: list[IndexService] = []

    def open_(data_dir: Path, clock: ManualClock) -> IndexService:
        svc = open_service(data_dir, None, clock, **OPTS)
        opened.append(svc)
        return svc

    yield open_
    for svc in opened:
        svc.close()


def test_an_item_lost_after_the_checkpoint_keeps_the_file_and_nothing_is_lost(
        tmp_path: Path, reopened: Callable[..., IndexService], caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    crashed, name = _crashed_copy(tmp_path, clock)
    _lose_item(crashed / "writing" / name, 15)  # its page never reached the disk
    caplog.set_level(logging.INFO, logger="mqindex")
    svc = reopened(crashed, clock)
    assert not [r for r in caplog.records if r.getMessage() == "index file quarantined"]
    assert not any((crashed / "quarantine").iterdir())
    assert [(f.state, f.items) for f in svc.files()] == [(FileState.WRITING, 15)]
    assert svc.checkpoint("t", 0) == 9  # not beyond what recovery kept: the broker re-dispatches from 10
    for i in range(15):
        assert [h.offset for h in svc.query("t", f"k{i}")] == [i]
    # the broker re-dispatches every record after the checkpoint: the five still in the file are not written
    # again, the five cut are
    for i in range(10, 20):
        svc.put("t", 0, i, 1, [f"k{i}"], clock.now + i)
    svc.flush()
    assert svc.checkpoint("t", 0) == 19
    for i in range(20):
        assert [h.offset for h in svc.query("t", f"k{i}")] == [i]
    assert sum(f.items for f in svc.files()) == 20


def test_a_hole_in_the_synced_items_quarantines_the_file(
        tmp_path: Path, reopened: Callable[..., IndexService], caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    crashed, name = _crashed_copy(tmp_path, clock)
    _lose_item(crashed / "writing" / name, 5)  # inside what the service checkpoint says was synced
    caplog.set_level(logging.INFO, logger="mqindex")
    svc = reopened(crashed, clock)
    rec = [r for r in caplog.records if r.getMessage() == "index file quarantined"]
    assert [Path(r.file).name for r in rec] == [name]  # type: ignore[attr-defined]
    assert "items crc32c" in rec[0].reason  # type: ignore[attr-defined]
    assert svc.files() == [] and svc.query("t", "k0") == []
