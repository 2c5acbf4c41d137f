"""The settings and figures of the cluster's merge of published index files (broker/cluster/published_merge.py):
`serve` flags, config file keys and MQINDEX_* reach the failover leader's merger of a real `mqindex serve` (GET
/v1/config, GET /v1/admin/index/status), bad values are refused before anything is made, /metrics exports its
figures, the console's Index page shows them (headless Chromium); and on real SeaweedFS and PostgreSQL the figures
count what a merge did (merges, inputs, bytes, backlog, inputs awaiting release)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, expect
from prometheus_client import generate_latest

from api.http.metrics import ClusterMergeCollector, Metrics
from broker.cluster.published_merge import PublishedMergeConfig, PublishedMerger
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api import test_web_page as web
from tests.api.server import ADMIN, READER, TOKENS, ServerProcess, wait_for
from tests.cluster.test_published_merge import CONFIG, GRACE_MS, History

browser = web.browser  # the module-scoped headless Chromium fixture


def _metric(text: str, name: str) -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
    return float(line.split()[1])


def test_cluster_merge_settings_reach_the_leaders_merger_and_its_figures_are_shown(
        tmp_path: Path, browser: Browser, artifacts_dir: Path) -> None:
    cfg = tmp_path / "mqindex.toml"
    cfg.write_text("cluster_merge_departed_ms = 7000\ncluster_merge_max_items = 5000\n")
    server = ServerProcess(tmp_path / "data", "--config", str(cfg), "--cluster-merge-grace-ms", "5000",
                           "--cluster-merge-tiers", "1", "--cluster-merge-interval-s", "0.5",
                           env={**TOKENS, "MQINDEX_CLUSTER_MERGE_SETTLE_MS": "1234",
                                "MQINDEX_CLUSTER_MERGE_MAX_INPUTS": "3"})
    server.start()
    try:
        url = server.url
        ix = httpx.get(url + "/v1/config", headers=ADMIN, timeout=30).json()["index"]
        assert (ix["cluster_merge_tiers_ms"], ix["cluster_merge_grace_ms"], ix["cluster_merge_settle_ms"],
                ix["cluster_merge_departed_ms"], ix["cluster_merge_max_inputs"], ix["cluster_merge_max_items"],
                ix["cluster_merge_interval_s"]) == ([86_400_000], 5000, 1234, 7000, 3, 5000, 0.5)

        def merging() -> dict[str, Any]:
            r = httpx.get(url + "/v1/admin/index/status", headers=READER, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()["cluster_merging"]  # type: ignore[no-any-return]

        wait_for("the single node's first pass as the failover leader", lambda: merging()["leader"])
        m = merging()
        assert (m["tiers_ms"], m["grace_ms"], m["settle_ms"], m["departed_ms"], m["max_inputs"], m["max_items"]) == (
            [86_400_000], 5000, 1234, 7000, 3, 5000)
        assert (m["merges"], m["backlog"], m["awaiting_release"], m["last_merge_ms"]) == (0, 0, 0, None)
        wait_for("a second pass (interval 0.5 s)", lambda: merging()["runs"] >= 2)
        text = httpx.get(url + "/metrics", timeout=30).text
        for name in ("mqindex_cluster_index_merges_total", "mqindex_cluster_index_merged_inputs_total",
                     "mqindex_cluster_index_merge_bytes_total", "mqindex_cluster_index_merge_backlog_files",
                     "mqindex_cluster_index_merge_awaiting_release_files"):
            assert _metric(text, name) == 0, name

        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/?page=index#token=reader-tok")
            expect(page.locator("body")).to_have_attribute("data-loaded", "index")
            expect(page.locator("#index-error")).to_have_text("")
            expect(page.locator("#cluster-merge-backlog b")).to_have_text("0 file(s)")
            expect(page.locator("#cluster-merge-count b")).to_have_text("0")
            expect(page.locator("#cluster-merge-last b")).to_have_text("none yet")
            expect(page.locator("#cluster-merge-tiers b")).to_have_text("1 day(s)")
            expect(page.locator("#cluster-merge-release")).to_contain_text("after the grace (5 s)")
            page.screenshot(path=str(artifacts_dir / "console-index-cluster-merging.png"), full_page=True)
        finally:
            page.close()
    finally:
        assert server.stop() == 0
    mqindex = str(Path(sys.executable).parent / "mqindex")
    for flag, value, says in (("--cluster-merge-tiers", "3", "cluster_merge_tiers must be <= 2"),
                              ("--cluster-merge-max-inputs", "1", "cluster_merge_max_inputs must be >= 2"),
                              ("--cluster-merge-grace-ms", "soon", "cluster_merge_grace_ms must be an integer")):
        r = subprocess.run([mqindex, "serve", "--data-dir", str(tmp_path / "bad"), flag, value],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and says in r.stderr, r.stderr
        assert not (tmp_path / "bad").exists()


def test_cluster_merge_figures_count_what_the_merges_did(tmp_path: Path, seaweedfs: SeaweedFS,
                                                         pg_url: Callable[[], str], closing: list[Any]) -> None:
    h = History(tmp_path, seaweedfs, pg_url(), closing)
    merger = PublishedMerger(h.meta0, h.store, h.clock, CONFIG)
    metrics = Metrics()
    metrics.registry.register(ClusterMergeCollector(lambda: merger.stats))

    def figures() -> dict[str, float]:
        text = generate_latest(metrics.registry).decode()
        return {n: _metric(text, f"mqindex_cluster_index_{n}") for n in (
            "merges_total", "merged_inputs_total", "merge_bytes_total", "merge_failures_total",
            "merge_backlog_files", "merge_awaiting_release_files")}

    due = len(h.dead_old) + len(h.rescued)  # node 7's four files of two days ago, the rescue's three

    def stop(step: str) -> None:
        raise RuntimeError(f"stopped at {step}")

    merger.hook = stop  # the first merge fails before its commit: nothing merged, everything still due
    merger.run_once(alive={0})
    assert figures() == {"merges_total": 0, "merged_inputs_total": 0, "merge_bytes_total": 0,
                         "merge_failures_total": 2, "merge_backlog_files": due, "merge_awaiting_release_files": 0}
    merger.hook = None
    rep = merger.run_once(alive={0})
    assert len(rep.merged) == 2
    written = sum(h.store.size(k) for k in rep.merged)
    assert figures() == {"merges_total": 2, "merged_inputs_total": due, "merge_bytes_total": written,
                         "merge_failures_total": 2, "merge_backlog_files": 0, "merge_awaiting_release_files": due}
    assert merger.stats.last_merged_file in rep.merged and merger.stats.last_merge_ms == h.clock.now
    h.clock.advance(GRACE_MS)
    merger.run_once(alive={0})
    assert figures()["merge_awaiting_release_files"] == 0 and figures()["merges_total"] == 2


def test_cluster_merge_config_follows_the_index_settings() -> None:
    from broker.cluster.published_merge import config_from_index
    from index_service.config import DAY_MS, ServiceConfig

    assert config_from_index(ServiceConfig()) == PublishedMergeConfig()
    assert config_from_index(ServiceConfig(cluster_merge_tiers_ms=())) is None
    got = config_from_index(ServiceConfig(cluster_merge_tiers_ms=(DAY_MS,), cluster_merge_grace_ms=1,
                                          cluster_merge_settle_ms=2, cluster_merge_departed_ms=3,
                                          cluster_merge_max_inputs=4, cluster_merge_max_items=5))
    assert got == PublishedMergeConfig(tiers_ms=(DAY_MS,), grace_ms=1, settle_ms=2, departed_ms=3, max_inputs=4,
                                       max_items=5)
