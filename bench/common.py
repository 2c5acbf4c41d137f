"""Shared pieces of every benchmark: timing, percentiles, progress lines and the printed table.

Benchmarks compare against a peer measured in the same run and print ratios, since the machines
they run on are shared and noisy.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("mqindex.bench")


@contextmanager
def served_collector() -> Iterator[None]:
    """The garbage collector as `mqindex serve` sets it once its node is open (api.cli.serve.settle_collector),
    for a benchmark that runs a node in process; as it was, after."""
    from api.cli.serve import settle_collector

    threshold = gc.get_threshold()
    settle_collector()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def percentile(samples: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by nearest rank; NaN for no samples."""
    if not samples:
        return float("nan")
    s = sorted(samples)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (field 3 onwards: index 0 is the state)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _cpu_s(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far, from /proc/PID/stat."""
    return _cpu_s(_stat(pid))


def wait_quiet(pid: int, quiet_ms: float = 30.0, timeout_s: float = 60.0) -> float:
    """Wait until a server is quiet (less than `quiet_ms` of CPU in a second: what the last phase left to do in the
    background, its uploads and index work, is done), so that the phase measured next counts its own work, as the
    one before did; the seconds it took (`timeout_s` at most: then the next phase counts the rest)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        c0 = process_cpu_s(pid)
        time.sleep(1.0)
        if (process_cpu_s(pid) - c0) * 1000 < quiet_ms:
            break
    return time.monotonic() - t0


def process_minor_faults(pid: int) -> int:
    """Minor page faults a process has taken so far (/proc/PID/stat: pages touched for the first time, or again
    after the allocator gave them back; on a virtual machine each costs several microseconds)."""
    return int(_stat(pid)[7])


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds (user + system) one thread of this process has used so far, from its /proc task stat."""
    return _cpu_s(_stat(f"self/task/{native_id}"))


class TreeCPU:
    """CPU seconds of this process and every process it started (directly or not), by role: a thread reads
    /proc every `interval` s and keeps each process's last reading, so a process that exits between two
    readings loses at most one interval. `role(cmdline)` names a process's group, once per process ("this
    process" is this one)."""

    def __init__(self, role: Callable[[str], str], interval: float = 0.25) -> None:
        self.role = role
        self.interval = interval
        self.seen: dict[tuple[int, str], tuple[str, float]] = {}  # (pid, start time) -> (role, CPU s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-cpu", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        stats: dict[int, list[str]] = {}
        children: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    stats[int(name)] = _stat(int(name))
                except OSError:
                    continue
                children.setdefault(int(stats[int(name)][1]), []).append(int(name))
        todo = [os.getpid()]
        while todo:  # this process and its descendants
            pid = todo.pop()
            todo += children.get(pid, [])
            key = (pid, stats[pid][19]) if pid in stats else None
            if key is None:
                continue
            role = self.seen[key][0] if key in self.seen else "this process" if pid == os.getpid() else None
            if role is None:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                role = self.role(cmd)
            self.seen[key] = (role, _cpu_s(stats[pid]))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def snapshot(self) -> dict[str, float]:
        """CPU seconds by role so far."""
        self._read()
        out: dict[str, float] = {}
        for role, cpu in list(self.seen.values()):
            out[role] = out.get(role, 0.0) + cpu
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Timer:
    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.elapsed = 0.0

    def stop(self) -> float:
        self.elapsed = time.perf_counter() - self.start
        return self.elapsed


@contextmanager
def timed() -> Any:
    t = Timer()
    yield t
    t.stop()


def progress(what: str, done: int, total: int, started: float) -> None:
    """One structured progress line on stderr (benchmarks are long-running work)."""
    rate = done / max(time.perf_counter() - started, 1e-9)
    print(f"[bench] {what}: {done}/{total} ({100.0 * done / max(total, 1):.0f}%), {rate:,.0f}/s",
          file=sys.stderr, flush=True)


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:  # NaN
            return "-"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.4f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table (pastes straight into docs/BENCHMARKS.md)."""
    rows = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [f"### {title}", "",
             "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def emit(text: str) -> None:
    print(text, flush=True)


def store_or_seaweedfs(given: str | None, work: Path, prefix: str) -> tuple[str, Any]:
    """The store URL a benchmark runs against: `given`, or a SeaweedFS started for the run under `work`
    (returned second, for the caller to stop; None when `given` was used)."""
    if given is not None:
        return given, None
    from storage_tier.seaweedfs_server import SeaweedFS

    print("[bench] starting SeaweedFS (10-20 s)", file=sys.stderr, flush=True)
    weed = SeaweedFS(work / "weed").start(bucket="mqindex")
    return weed.store_url("mqindex", prefix), weed


def save_results(name: str, results: dict[str, Any]) -> Path:
    """Write the raw figures as JSON under bench-results/ (or MQINDEX_BENCH_OUT) for later comparison."""
    out = Path(os.environ.get("MQINDEX_BENCH_OUT", "bench-results"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    return path
