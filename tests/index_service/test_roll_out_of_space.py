"""A roll that runs out of disk after sealing the WRITING file (saving the sealed file's offset ranges, or the
checkpoint naming the next file, fails with ENOSPC once) is finished when the write is tried again: puts
going on meanwhile land in the next file, flush() succeeds, every record is found, and the sealed file is
handed on (SEALED), never written to."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from index_service import FileState, IndexOutOfSpace, IndexService, ranges
from tests.index_service.helpers import ManualClock, open_service

RECORDS = 300  # max_items 20: fifteen rolls


class FailOnce:
    """Wraps a function: the first call for which `when(*args)` holds raises ENOSPC instead of running."""

    def __init__(self, fn: Callable[..., Any], when: Callable[..., bool]) -> None:
        self.fn, self.when = fn, when
        self.fired = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            fire = not self.fired.is_set() and self.when(*args, **kwargs)
            if fire:
                self.fired.set()
        if fire:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return self.fn(*args, **kwargs)


def _flush_when_space_returns(svc: IndexService, timeout: float = 30.0) -> None:
    """flush(); IndexOutOfSpace only says a try made meanwhile failed for lack of space: the writer retries."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            svc.flush(timeout)
            return
        except IndexOutOfSpace:
            assert time.monotonic() < deadline, "the writer did not get past the out-of-space error"


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.005)


@pytest.mark.parametrize("step", ["ranges", "checkpoint"])
def test_a_roll_out_of_space_after_sealing_is_finished_on_retry(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, step: str) -> None:
    clock = ManualClock()
    svc = open_service(tmp_path / "idx", None, clock, max_items=20, write_batch=4)
    try:
        if step == "ranges":  # saving the sealed file's offset ranges
            fault = FailOnce(ranges.save, lambda folders, stem, rs: True)
            monkeypatch.setattr(ranges, "save", fault)
        else:  # saving the checkpoint naming the next file (the only save naming a file with no item in it)
            fault = FailOnce(svc.checkpoints.save, lambda offsets, writing, items, rs=None: items == 0)
            monkeypatch.setattr(svc.checkpoints, "save", fault)
        for i in range(RECORDS // 3):
            svc.put_batch([("t", i % 3, i, 10, clock.now + i, [f"k{i}"])])
        _wait(fault.fired.is_set, "a roll hit the fault")
        for i in range(RECORDS // 3, RECORDS):  # puts go on while the writer waits to retry, and after
            svc.put_batch([("t", i % 3, i, 10, clock.now + i, [f"k{i}"])])
        _flush_when_space_returns(svc)
        for i in range(RECORDS):
            assert [h.offset for h in svc.query("t", f"k{i}")] == [i], i
        files = svc.files()
        assert [f.state for f in files] == [FileState.SEALED] * (len(files) - 1) + [FileState.WRITING]
        assert sum(f.items for f in files) == RECORDS
        # and puts after it go on as usual
        svc.put("t", 0, RECORDS, 10, ["after"], clock.now)
        svc.flush()
        assert [h.offset for h in svc.query("t", "after")] == [RECORDS]
        assert svc.checkpoint("t", 0) == RECORDS
    finally:
        svc.close()
