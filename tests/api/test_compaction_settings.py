"""The compaction settings of `serve` change what they name: a short `--compaction-interval-s` runs cycles by
itself, the default (5 min) does not within the same wait; a bad value is one clear line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.api.server import ServerProcess


def _runs(url: str) -> int:
    return int(httpx.get(f"{url}/v1/admin/compaction", timeout=10).json()["runs"])


def test_compaction_interval_setting_runs_cycles(tmp_path: Path) -> None:
    fast = ServerProcess(tmp_path / "fast", "--compaction-interval-s", "0.3").start()
    slow = ServerProcess(tmp_path / "slow").start()
    try:
        deadline = time.monotonic() + 30
        while _runs(fast.url) < 2:
            assert time.monotonic() < deadline, "no compaction cycle ran with --compaction-interval-s 0.3"
            time.sleep(0.1)
        assert _runs(slow.url) == 0  # the default interval is 5 minutes
    finally:
        fast.stop()
        slow.stop()


def test_bad_compaction_setting_is_one_clear_line(tmp_path: Path) -> None:
    mqindex = str(Path(sys.executable).parent / "mqindex")
    r = subprocess.run([mqindex, "serve", "--data-dir", str(tmp_path / "d"), "--compaction-part-size", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "compaction_part_size" in r.stderr and len(r.stderr.strip().splitlines()) == 1
