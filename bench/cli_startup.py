"""The command line's start-up: the wall time of `mqindex --help`, `query` and `get` (each a new process, as a
user runs them) next to its floor in the same run, `python -c pass` of the same interpreter, and next to the
server's own answer to the same request (so what the command line adds shows apart from the server's work), with
the CPU seconds each run used (steadier than wall time on a busy machine). Goal: each under 0.3 s of wall time.

Run: `mqindex bench cli [--runs 15]` (also `mqindex bench cli_startup`). It starts its own `mqindex serve` in a
temporary directory, creates a topic and produces one message to query and get.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.serve_process import ServeProcess

GOAL_S = 0.3


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wall_s(cmd: list[str], runs: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of each of `runs` runs of cmd (a non-zero exit is an error: a failed run is not a figure);
    the CPU seconds (user + system) of each run are appended to `cpu`."""
    out = []
    for _ in range(runs):
        cpu0, started = _children_cpu_s(), time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, timeout=120)
        out.append(time.perf_counter() - started)
        if cpu is not None:
            cpu.append(_children_cpu_s() - cpu0)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return out


def request_s(url: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 - our own server
            resp.read()
        out.append(time.perf_counter() - started)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench cli")
    ap.add_argument("--runs", type=int, default=15, help="runs of each command (default: %(default)s)")
    a = ap.parse_args(argv)
    mqindex = str(Path(sys.executable).parent / "mqindex")
    with tempfile.TemporaryDirectory(prefix="mqindex-bench-cli-") as tmp:
        server = ServeProcess(Path(tmp) / "data", [], Path(tmp) / "serve.log")
        try:
            url = server.url
            subprocess.run([mqindex, "topics", "create", "orders", "--url", url], check=True, capture_output=True)
            produced = subprocess.run([mqindex, "produce", "orders", "v", "--key", "k1", "--json", "--url", url],
                                      check=True, capture_output=True, text=True)
            msg_id = json.loads(produced.stdout)[0]["msg_id"]
            cmds = {"python -c pass": ([sys.executable, "-c", "pass"], None),
                    "mqindex --help": ([mqindex, "--help"], None),
                    "mqindex query orders k1": ([mqindex, "query", "orders", "k1", "--url", url],
                                                f"{url}/v1/messages?topic=orders&key=k1"),
                    "mqindex get MSG_ID": ([mqindex, "get", msg_id, "--url", url], f"{url}/v1/messages/{msg_id}")}
            rows: list[tuple[str, list[float], list[float], list[float] | None]] = []
            for name, (cmd, direct) in cmds.items():
                cpu: list[float] = []
                rows.append((name, wall_s(cmd, a.runs, cpu), cpu, request_s(direct, a.runs) if direct else None))
        finally:
            server.stop()
    floor = statistics.median(rows[0][1])
    print(f"{'command':<26} {'median s':>9} {'p90 s':>7} {'- floor s':>10} {'cpu s':>7} {'server s':>9}  "
          f"goal {GOAL_S} s (wall, median)")
    worst = 0.0
    for name, samples, cpu, server_samples in rows:
        med = statistics.median(samples)
        p90 = sorted(samples)[max(0, int(len(samples) * 0.9) - 1)]
        srv = f"{statistics.median(server_samples):9.3f}" if server_samples else f"{'-':>9}"
        verdict = "" if name.startswith("python") else ("  met" if med < GOAL_S else "  MISSED")
        if not name.startswith("python"):
            worst = max(worst, med)
        print(f"{name:<26} {med:9.3f} {p90:7.3f} {med - floor:10.3f} {statistics.median(cpu):7.3f} {srv}{verdict}")
    print(f"floor (python -c pass) {floor:.3f} s; slowest command {worst:.3f} s = floor x {worst / floor:.1f}")
    return 0
