"""What key lookups cost, on a real `mqindex serve`'s /metrics: each sealed index file's key filter is asked
before the file is read, and the files and GETs of each lookup are counted."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.api.server import ServerProcess, wait_for


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", text, flags=re.M)
    return float(m.group(1)) if m else 0.0


def test_metrics_count_filter_answers_files_read_per_lookup_and_filter_memory(tmp_path: Path) -> None:
    s = ServerProcess(tmp_path / "data", "--index-max-items", "10", "--index-maintain-interval-s", "0.2",
                      "--index-filter-cache-bytes", "1000000").start()
    try:
        assert httpx.post(f"{s.url}/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
        for f in range(4):  # three sealed files of ten entries and a full writing one, each with keys of its own
            r = httpx.post(f"{s.url}/v1/topics/orders/messages", timeout=30, json={"messages": [
                {"key": f"k-{f}-{i}", "value": "v", "partition": 0} for i in range(10)]})
            assert r.status_code == 200, r.text

        def sealed() -> bool:  # compacted or uploaded: a SEALED file has no filter yet and is read unasked
            files = httpx.get(f"{s.url}/v1/index/files").json()["files"]
            return sum(1 for x in files if x["state"] in ("COMPACTED", "UPLOADED") and x["items"]) >= 3
        wait_for("three index files with their key filters", sealed, timeout=60)

        r = httpx.get(f"{s.url}/v1/messages", params={"topic": "orders", "key": "k-1-5"})
        assert r.status_code == 200 and len(r.json()["messages"]) == 1, r.text
        r = httpx.get(f"{s.url}/v1/messages", params={"topic": "orders", "key": "absent"})
        assert r.status_code == 200 and r.json()["messages"] == [], r.text

        text = httpx.get(f"{s.url}/metrics").text
        said_no = metric(text, "mqindex_index_filter_checks_total", '{verdict="no"}')
        maybe = metric(text, "mqindex_index_filter_checks_total", '{verdict="maybe"}')
        # present key: two sealed files ruled out; absent key: all three (the writing file has no filter yet)
        assert maybe >= 1 and said_no >= 2 + 3, text
        assert metric(text, "mqindex_index_lookup_files_count") >= 2
        # the filters held in memory, under the bound the setting gives
        for scope in ("local", "published"):
            assert metric(text, "mqindex_index_filter_limit_bytes", f'{{scope="{scope}"}}') == 1_000_000, text
        assert 0 < metric(text, "mqindex_index_filter_bytes", '{scope="local"}') <= 1_000_000, text
    finally:
        s.stop()
