"""tests/watchdog.py ends a pytest process whose test cannot be interrupted, or whose exit never comes, and says
where it hung (a child pytest on a test file written here, with short bounds)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HANGS_IN_THE_TEST = '''
import time
import pytest

@pytest.mark.timeout(1)
def test_swallows_its_timeout():
    while True:  # what a call stuck in C code looks like to pytest-timeout: its interruption never lands
        try:
            time.sleep(5)
        except BaseException:
            pass
'''

HANGS_AT_EXIT = '''
import threading

def test_leaves_a_thread_that_never_ends():
    threading.Thread(target=threading.Event().wait, name="never-ends").start()  # not a daemon: exit waits on it
'''

CLEAN = '''
def test_nothing_left():
    assert 1 + 1 == 2
'''


def _run(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess[str], float]:
    test_file = tmp_path / "test_child.py"
    test_file.write_text(body)
    env = os.environ | {"MQINDEX_TEST_WATCHDOG_MARGIN_S": "2", "MQINDEX_TEST_WATCHDOG_EXIT_S": "3"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.watchdog",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(test_file)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - started


def test_a_test_that_cannot_be_interrupted_ends_the_process_naming_where_it_hung(tmp_path: Path) -> None:
    done, seconds = _run(tmp_path, HANGS_IN_THE_TEST)
    assert done.returncode != 0
    assert "Timeout (" in done.stderr
    assert "test_swallows_its_timeout" in done.stderr
    assert seconds < 30


def test_an_exit_that_never_comes_is_ended_after_its_bound(tmp_path: Path) -> None:
    done, seconds = _run(tmp_path, HANGS_AT_EXIT)
    assert "1 passed" in done.stdout
    assert "Timeout (" in done.stderr
    assert done.returncode != 0
    assert seconds < 30


def test_a_clean_run_is_left_alone(tmp_path: Path) -> None:
    done, _ = _run(tmp_path, CLEAN)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Timeout (" not in done.stderr
