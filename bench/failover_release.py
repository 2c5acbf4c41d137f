"""The previous release of mqindex, built into a virtualenv of its own: CHANGELOG.md names the newest release and
the full commit it was cut from (tags may not travel with this repository); that commit's files are exported
with `git archive` and installed with their compiled modules. Used by the rolling upgrade part of
`mqindex bench failover` and by tests/cluster/test_upgrade_mixed.py.

The virtualenv is built once per machine under MQINDEX_UPGRADE_CACHE (default
~/.cache/mqindex/upgrade/<commit>; a lock file keeps two processes from building it at once) and reused: its own
Python and pip, the release's package installed from its files, the third-party packages taken from this
virtualenv (a .pth line; only the build requirements come from pip)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def previous_release() -> tuple[str, str]:
    """(version, full commit id) of the newest release in CHANGELOG.md."""
    text = (ROOT / "CHANGELOG.md").read_text()
    m = re.search(r"^## (v\d+\.\d+\.\d+)\s*$.*?commit `([0-9a-f]{40})`", text, re.M | re.S)
    assert m is not None, "CHANGELOG.md names no release with its commit"
    return m.group(1), m.group(2)


def release_venv(commit: str) -> Path:
    """The previous release's virtualenv (built on first use, then reused): its `bin/mqindex`."""
    root = Path(os.environ.get("MQINDEX_UPGRADE_CACHE", Path.home() / ".cache" / "mqindex" / "upgrade")) / commit
    root.mkdir(parents=True, exist_ok=True)
    venv, src, done = root / "venv", root / "src", root / "built"
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return venv
        started = time.monotonic()
        subprocess.run(["rm", "-rf", str(venv), str(src)], check=True)
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path("
                               "'purelib'))"], check=True, capture_output=True, text=True).stdout.strip()
        # the third-party packages of this virtualenv, after the release's own (this tree's package is not on
        # that path: its editable finder is loaded by a .pth file, which a path line does not run)
        Path(site, "zz_third_party.pth").write_text(sysconfig.get_path("purelib") + "\n")
        # its build requirements (Cython, setuptools) in pip's isolated build environment: from pip's cache, or
        # fetched once; compiling the release's Cython modules took 5 min 41 s on a loaded 2-core machine
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", str(src)],
                       check=True, capture_output=True)
        copy_package_data(src, Path(site))
        done.write_text(f"built in {time.monotonic() - started:.0f} s\n")
        return venv


def copy_package_data(src: Path, site: Path) -> None:
    """The release's data files its wheel left out (0.3.0 declares no package data: the console's
    api/web/index.html was missing and `serve` stopped on it), copied beside its installed modules."""
    for f in src.rglob("*"):
        rel = f.relative_to(src)
        if f.is_file() and (site / rel.parts[0]).is_dir() and not (site / rel).exists() and f.suffix not in (
                ".py", ".pyx", ".pxd", ".c"):
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, site / rel)


def previous_mqindex() -> tuple[str, Path]:
    """(version, `mqindex` executable) of the newest release in CHANGELOG.md, its virtualenv built if needed."""
    version, commit = previous_release()
    return version, release_venv(commit) / "bin" / "mqindex"
