"""`mqindex bench cli`: the start-up benchmark runs against its own server and prints each command beside the floor."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def test_bench_cli_prints_each_command_against_the_floor() -> None:
    r = subprocess.run([MQINDEX, "bench", "cli", "--runs", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:2] == ["command", "median"]
    rows = {re.split(r"\s{2,}", line.strip())[0]: line for line in lines[1:-1]}
    assert list(rows) == ["python -c pass", "mqindex --help", "mqindex query orders k1", "mqindex get MSG_ID"]
    for name, line in rows.items():
        if name != "python -c pass":
            assert line.rstrip().endswith(("met", "MISSED")), line
    assert re.fullmatch(r"floor \(python -c pass\) [\d.]+ s; slowest command [\d.]+ s = floor x [\d.]+", lines[-1])
