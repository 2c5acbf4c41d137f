"""`python -m storage_tier.seaweedfs_server` run as a user runs it: stopping it (Ctrl-C, SIGTERM, SIGHUP, or
killing it outright) stops the `weed` server it started, whether that server was ready or still starting."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def weed_children(parent: int) -> list[int]:
    """The pids of the `weed` processes whose parent is `parent` (a /proc scan)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == parent and comm == "weed":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie (an exited child its new parent has not reaped yet is gone for the user)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def wait_until(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:.0f}s")


def read_line_with(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        if sel.select(timeout=max(0.0, deadline - time.monotonic())):
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if text in line:
                return line
    raise AssertionError(f"no line with {text!r} within {timeout:.0f}s; output: {''.join(seen)!r}")


@pytest.fixture
def helper(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "storage_tier.seaweedfs_server", str(tmp_path / "weed")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    weeds: list[int] = []
    try:
        wait_until("the helper starts weed", lambda: weeds.extend(weed_children(proc.pid)) or weeds, 30)
        proc.weed_pid = weeds[0]  # type: ignore[attr-defined]
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pid in weeds:  # whatever the outcome, leave nothing running
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=["ctrl-c", "sigterm", "sighup", "sigkill"])
@pytest.mark.parametrize("phase", ["ready", "starting"])
def test_stopping_the_helper_stops_weed(helper: subprocess.Popen[str], sig: signal.Signals, phase: str) -> None:
    weed: int = helper.weed_pid  # type: ignore[attr-defined]
    if phase == "ready":
        line = read_line_with(helper, "SeaweedFS S3 ready", 90)
        assert "s3://mqindex/?endpoint=http://127.0.0.1:" in line
    assert alive(weed)
    helper.send_signal(sig)
    rc = helper.wait(30)
    assert rc == (-signal.SIGKILL if sig == signal.SIGKILL else 0), helper.stdout.read()  # type: ignore[union-attr]
    wait_until(f"weed (pid {weed}) stops after the helper got {sig.name}", lambda: not alive(weed), 30)
