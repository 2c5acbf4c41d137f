"""A small tmpfs to fill in disk-full tests: mounted for one test, unmounted also when the test fails.

Mounting needs root (the test machines and CI run as root); a failed mount fails the test, never skips it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size_mb: int) -> Iterator[Path]:
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        done = subprocess.run(["umount", str(mount_point)], check=False)
        if done.returncode != 0:  # something still holds a file open: detach it now, freed when released
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(path: Path, leave: int = 0, chunk: int = 1 << 20) -> int:
    """Write `path` until the filesystem has about `leave` bytes free (0: until it refuses). Returns its size."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            st = os.statvfs(path)
            room = st.f_bavail * st.f_frsize - leave
            if room <= 0:
                break
            try:
                n = os.write(fd, b"\xa5" * min(chunk, room))
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            written += n
    finally:
        os.close(fd)
    return written


def free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def run_child_once_full(child: str, args: list[str], mount: Path, max_free: int,
                        leave: int = 0) -> tuple[int, str, str]:
    """Run `child` (Python source) with `args`; once it prints READY, fill `mount` to `leave` bytes free (checked:
    under `max_free`) and tell it to go on (a line on its stdin). Returns (exit code, its stdout after READY,
    stderr). A child in a separate process: a SIGBUS kills it, not the test run; it is killed if it outlives its
    120 s."""
    proc = subprocess.Popen([sys.executable, "-c", child, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read() if proc.stderr else ""
        fill(mount / "ballast", leave=leave)
        assert free(mount) < max_free
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return proc.returncode, out, err
