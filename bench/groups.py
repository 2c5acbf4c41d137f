"""Consumer groups: the cost of the lag metrics per /metrics scrape and the console's page load of a large topic,
each next to its peer in the same run, on one real `mqindex serve` with its Kafka listener.

1. Lag per scrape: `--groups` groups (default 1,000) each with committed offsets on every partition of one topic
   of `--partitions` partitions (default 100): 100,000 series of mqindex_group_lag and as many of
   mqindex_group_lag_seconds. The server's CPU per scrape (from /proc, so the client's parsing does not count)
   is measured for the first scrape after the offsets were committed (the record times for the lag in time were
   read ahead as the commits landed; what is missing is read within a budget), then steady (nothing changed), then
   after every group moved (`--moves` rounds, default 3, each measured by its first scrape: one scrape counts
   /proc's 10 ms ticks).
   Peer: the same server's scrape before any group existed. Goal: < 50 ms of server CPU a scrape. Beside the
   process's CPU (every thread: uploads, metadata snapshots after the commits...), the lag lines' own CPU as the
   server measures it on the scrape's thread (`mqindex_group_lag_render_cpu_seconds`), the largest of the scrapes.
   Before the first scrape after a round of commits the bench waits (up to 60 s) for the server to be quiet (under
   30 ms of CPU in a second: the metadata snapshot and uploads after 100,000 commits done), as it was for the peer;
   "quiet after" is how long that took. The work moved to commit time is printed too: the CPU the server's lag rows
   took per commit applied (mqindex_group_lag_apply_cpu_seconds_total / mqindex_group_lag_applies_total) and
   the reads ahead of the record times (mqindex_group_lag_time_read_cpu_seconds_total).
2. Console page load: the topic page (partitions table, configs, first page of the message browser) of a topic
   of `--page-partitions` partitions (default 1,000) in Debian's Chromium (Playwright), median of `--loads`:
   time to first render of the partitions table (navigation start to the paint of its first row's text, as the
   Element Timing API gives it), to every partition's row in the document and the frame after it (a rAF callback,
   then a task: most rows are below the fold, never painted), and to the page fully loaded. Peer: the same page of
   a 1-partition topic. Goal: < 300 ms to first render.

Run: `mqindex bench groups [--groups 1000] [--partitions 100] [--page-partitions 1000] [--scrapes 10] [--moves 3]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import emit, process_cpu_s, process_minor_faults, progress, save_results, table, wait_quiet
from bench.serve_process import ServeProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CORES = os.cpu_count() or 1
GOAL_SCRAPE_MS, GOAL_RENDER_MS = 50.0, 300.0
RENDER_CPU = "\nmqindex_group_lag_render_cpu_seconds "  # the lag lines' own CPU, measured by the server on its thread
APPLY_CPU, APPLIES = "\nmqindex_group_lag_apply_cpu_seconds_total ", "\nmqindex_group_lag_applies_total "
TIME_READS = "\nmqindex_group_lag_time_read_cpu_seconds_total "  # record times read ahead, on their own thread


def counter(text: str, name: str) -> float:
    return float(text[text.rindex(name) + len(name):].split("\n", 1)[0]) if name in text else 0.0


def scrape(s: ServeProcess, n: int) -> dict[str, float]:
    """n scrapes of /metrics one after another: server CPU ms per scrape (the process's CPU over the n scrapes / n:
    /proc counts in 10 ms ticks), wall ms per scrape (median), the group series and bytes of the last one."""
    wall, render = [], []
    with httpx.Client(timeout=120) as client:
        c0, f0 = process_cpu_s(s.proc.pid), process_minor_faults(s.proc.pid)
        for _ in range(n):
            t0 = time.perf_counter()
            text = client.get(s.url + "/metrics").text
            wall.append((time.perf_counter() - t0) * 1000)
            render.append(1000 * counter(text, RENDER_CPU))
        cpu = (process_cpu_s(s.proc.pid) - c0) * 1000 / n
        faults = (process_minor_faults(s.proc.pid) - f0) / n
    families = ("mqindex_group_lag{", "mqindex_group_lag_seconds{")
    series = sum(1 for line in text.splitlines() if line.startswith(families))
    return {"cpu_ms": cpu, "render_cpu_ms": max(render), "wall_ms": statistics.median(wall), "minor_faults": faults,
            "group_series": series,
            "bytes": len(text), "apply_cpu_s": counter(text, APPLY_CPU), "applies": counter(text, APPLIES),
            "time_read_cpu_s": counter(text, TIME_READS)}


def settle(s: ServeProcess, quiet_ms: float = 30.0, timeout_s: float = 60.0) -> float:
    """Wait until the server is quiet again after a round of commits (the metadata snapshot and uploads that follow
    100,000 commits are done), so that the scrape measured next counts its own work (bench/common.wait_quiet)."""
    return wait_quiet(s.proc.pid, quiet_ms, timeout_s)


def commit_all(s: ServeProcess, topic: str, partitions: int, groups: int, shift: int) -> None:
    """Every group commits an offset on every partition of `topic` through Kafka's AlterConsumerGroupOffsets (an
    OffsetCommit outside group management; group g at (g + shift) % 10: 10 distinct offsets, so the lag in time
    reads 10 records per partition once)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": s.bootstrap})
    started = time.perf_counter()
    pending = []
    for g in range(groups):
        offsets = [TopicPartition(topic, p, (g + shift) % 10) for p in range(partitions)]
        pending += admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(f"bench-{g}", offsets)]).values()
        if len(pending) >= 50 or g == groups - 1:
            for f in pending:
                f.result(120)
            pending = []
        if g and g % 200 == 0:
            progress("groups committed", g, groups, started)


def lag_per_scrape(work: Path, groups: int, partitions: int, scrapes: int, moves: int) -> dict[str, Any]:
    s = ServeProcess(work / "lag", ["--upload-interval-s", "1"], work / "lag.log", kafka=True)
    try:
        httpx.post(f"{s.url}/v1/topics", json={"name": "lagged", "partitions": partitions},
                   timeout=120).raise_for_status()
        for p in range(partitions):
            httpx.post(f"{s.url}/v1/topics/lagged/messages", timeout=60, json={
                "messages": [{"value": f"m{i}", "partition": p} for i in range(20)]}).raise_for_status()
        out = {"no groups (peer)": scrape(s, max(scrapes, 20))}
        commit_all(s, "lagged", partitions, groups, 0)
        quiet = settle(s)
        out["first scrape after commits"] = scrape(s, 1) | {"settled_s": quiet}
        out["next scrapes (record times read)"] = scrape(s, scrapes)
        out["steady"] = scrape(s, scrapes)
        firsts = []
        for shift in range(1, moves + 1):  # a single scrape counts /proc's 10 ms ticks: several moves, each measured
            commit_all(s, "lagged", partitions, groups, shift)
            quiet = settle(s)
            firsts.append(scrape(s, 1) | {"settled_s": quiet})
        out[f"first scrape after every group moved (mean of {moves})"] = {
            k: (statistics.mean(f[k] for f in firsts) if k != "render_cpu_ms" else max(f[k] for f in firsts))
            for k in firsts[-1]}
        out[f"first scrape after every group moved (worst of {moves})"] = max(firsts, key=lambda f: f["cpu_ms"])
        out["steady after the moves"] = scrape(s, scrapes)
        return out
    finally:
        s.stop()


def per_commit_us(lag: dict[str, dict[str, float]]) -> list[list[Any]]:
    """The CPU the server's lag rows took per commit applied, and its reads ahead of the record times (its counters,
    read from the scrapes' text around each round of commits): the work done at commit time so that a scrape only
    renders."""
    moved = next(k for k in lag if k.startswith("first scrape after every group moved (mean"))
    rounds = [("every group committed", "no groups (peer)", "first scrape after commits"),
              (f"every group moved, {moved.rsplit(' ', 1)[1][:-1]} times", "steady", "steady after the moves")]
    out = []
    for name, before, after in rounds:
        n = lag[after]["applies"] - lag[before]["applies"]
        cpu = lag[after]["apply_cpu_s"] - lag[before]["apply_cpu_s"]
        reads = lag[after]["time_read_cpu_s"] - lag[before]["time_read_cpu_s"]
        out.append([name, int(n), 1e6 * cpu / max(n, 1), 1000 * cpu, 1000 * reads, 1e6 * (cpu + reads) / max(n, 1)])
    return out


MARKS = """
window.__marks = {};
// when a cell's text was painted: the Element Timing API's renderTime for the `elementtiming` cells
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__marks[e.identifier] ??= e.renderTime || e.loadTime;
}).observe({ type: "element", buffered: true });
new MutationObserver(() => {
  const tb = document.querySelector("#topic-partitions tbody");
  if (tb && tb.rows.length && !window.__marks.first) {
    window.__marks.first = performance.now();
    tb.rows[0].cells[0].setAttribute("elementtiming", "rendered");
  }
  if (tb && tb.rows.length >= window.__want && !window.__marks.table) {  // most rows are below the fold, never
    window.__marks.table = performance.now();                               // painted: the frame after them instead
    requestAnimationFrame(() => setTimeout(() => { window.__marks.complete = performance.now(); }));
  }
  if (document.body && document.body.dataset.loaded === "topic" && !window.__marks.loaded)
    window.__marks.loaded = performance.now();
}).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ["data-loaded"] });
"""


def page_loads(work: Path, sizes: dict[str, int], loads: int) -> dict[str, dict[str, float]]:
    from playwright.sync_api import sync_playwright

    s = ServeProcess(work / "page", [], work / "page.log")
    out: dict[str, dict[str, float]] = {}
    try:
        for name, n in sizes.items():
            httpx.post(f"{s.url}/v1/topics", json={"name": name, "partitions": n}, timeout=300).raise_for_status()
            for first in range(0, n * 3, 500):  # 3 messages a partition (by key), 500 a request
                httpx.post(f"{s.url}/v1/topics/{name}/messages", timeout=120, json={"messages": [
                    {"key": f"k{i}", "value": f"v{i}"} for i in range(first, min(first + 500, n * 3))]}
                           ).raise_for_status()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"])
            try:
                for name, n in sizes.items():
                    rendered, complete, loaded, cpu = [], [], [], []
                    for i in range(loads + 1):  # the first load warms the server and the browser: not counted
                        page = browser.new_page(viewport={"width": 1400, "height": 900})
                        page.add_init_script(f"window.__want = {n};" + MARKS)
                        c0 = process_cpu_s(s.proc.pid)
                        page.goto(f"{s.url}/?page=topic&topic={name}")
                        page.wait_for_function("['rendered', 'complete', 'loaded'].every((k) => window.__marks[k])",
                                               timeout=120_000)
                        marks = page.evaluate("window.__marks")
                        if i:
                            rendered.append(marks["rendered"])
                            complete.append(marks["complete"])
                            loaded.append(marks["loaded"])
                            cpu.append((process_cpu_s(s.proc.pid) - c0) * 1000)
                        page.close()
                    out[f"{name} ({n} partitions)"] = {"first_render_ms": statistics.median(rendered),
                                                       "table_ms": statistics.median(complete),
                                                       "loaded_ms": statistics.median(loaded),
                                                       "server_cpu_ms": statistics.median(cpu)}
            finally:
                browser.close()
        return out
    finally:
        s.stop()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="mqindex bench groups")
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--page-partitions", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=10)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--moves", type=int, default=3, help="rounds of every group moving, each then scraped once")
    ap.add_argument("--skip", choices=["lag", "page"], help="leave one part out")
    a = ap.parse_args(argv)
    if a.skip != "page" and not Path(CHROMIUM).exists():
        print(f"Chromium is needed for the page load ({CHROMIUM}): apt-get install chromium", file=sys.stderr)
        return 2
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        work = Path(tmp)
        if a.skip != "lag":
            lag = lag_per_scrape(work, a.groups, a.partitions, a.scrapes, a.moves)
            results["lag"] = lag
            peer = lag["no groups (peer)"]["cpu_ms"]
            emit(table(f"Lag metrics per /metrics scrape: {a.groups:,} groups x {a.partitions} partitions "
                       f"(goal < {GOAL_SCRAPE_MS:.0f} ms server CPU)",
                       ["scrape", "server CPU ms a scrape", "lag lines' CPU ms (max)", "wall ms (median)",
                        "server minor faults a scrape", "group series", "body bytes", "x peer",
                        "scrapes/s 2 cores allow", "quiet after (s)"],
                       [[k, v["cpu_ms"], v["render_cpu_ms"], v["wall_ms"], v["minor_faults"], v["group_series"],
                         v["bytes"],
                         v["cpu_ms"] / max(peer, 1e-3), CORES * 1000 / max(v["cpu_ms"], 1e-3),
                         v.get("settled_s", "")]
                        for k, v in lag.items()]))
            emit(table("Work at commit time: the lag rows followed as commits are applied (server CPU on the "
                       "metadata thread; record times read ahead on their own)",
                       ["round", "commits applied", "rows: CPU us a commit", "rows: CPU ms in all",
                        "record times read ahead: CPU ms", "both: CPU us a commit"],
                       per_commit_us(lag)))
        if a.skip != "page":
            page = page_loads(work, {"small": 1, "large": a.page_partitions}, a.loads)
            results["page"] = page
            small = next(iter(page.values()))
            emit(table(f"Console topic page load in Chromium (goal < {GOAL_RENDER_MS:.0f} ms to first render)",
                       ["topic", "first render ms", "every partition's row ms", "fully loaded ms",
                        "server CPU ms a load", "first render x peer"],
                       [[k, v["first_render_ms"], v["table_ms"], v["loaded_ms"], v["server_cpu_ms"],
                         v["first_render_ms"] / small["first_render_ms"]] for k, v in page.items()]))
    print(f"results: {save_results('groups', results)}", file=sys.stderr)
    return 0
