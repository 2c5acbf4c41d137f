"""Throughput sparklines in the console over a real `mqindex serve`: GET /v1/console/throughput counts every
message and byte produced in the last hour per topic and per node (kept by the node in memory), a read token
reads it and no token is refused; the Topics and Nodes pages in headless Chromium draw a messages/s and a
bytes/s sparkline per row. Screenshots go to the test artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, expect

from tests.api import test_web_page as web
from tests.api.server import ADMIN, READER, ServerProcess

browser = web.browser  # the module-scoped headless Chromium fixture
def produced(console_server: ServerProcess, topic: str, partitions: int, values: list[str]) -> None:
    r = httpx.post(f"{console_server.url}/v1/topics", json={"name": topic, "partitions": partitions}, headers=ADMIN)
    assert r.status_code == 201, r.text
    if not values:
        return
    r = httpx.post(f"{console_server.url}/v1/topics/{topic}/messages", headers=ADMIN, timeout=30,
                   json={"messages": [{"key": f"k{i}", "value": v} for i, v in enumerate(values)]})
    assert r.status_code == 200, r.text


def history(console_server: ServerProcess, **params: str) -> dict[str, Any]:
    r = httpx.get(f"{console_server.url}/v1/console/throughput", headers=READER, params=params, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_throughput_counts_each_topic_and_node_and_the_console_draws_sparklines(
        console_server: ServerProcess, browser: Browser, artifacts_dir: Path) -> None:
    produced(console_server, "busy", 3, ["x" * 100] * 30)
    produced(console_server, "quiet", 1, ["y" * 10] * 2)
    produced(console_server, "idle", 1, [])
    body = history(console_server)
    assert body["step_s"] == 10 and len(body["nodes"]) == 1
    busy, quiet = body["topics"]["busy"], body["topics"]["quiet"]
    assert (busy["messages"], quiet["messages"]) == (30, 2)
    assert busy["bytes"] > 30 * 100 and 20 < quiet["bytes"] < busy["bytes"]  # the stored batches, values and all
    assert "idle" not in body["topics"]
    for series in (busy, quiet, body["nodes"][0]):
        assert len(series["messages_per_s"]) == len(series["bytes_per_s"]) == 360
        assert series["messages_per_s"][-1] > 0 or series["messages_per_s"][-2] > 0  # this bucket or the last
    [node] = body["nodes"]
    assert (node["node_id"], node["messages"], node["bytes"]) == (0, 32, busy["bytes"] + quiet["bytes"])
    assert history(console_server, scope="node")["total"]["messages"] == 32
    assert httpx.get(f"{console_server.url}/v1/console/throughput").status_code == 401
    assert httpx.get(f"{console_server.url}/v1/console/throughput", params={"scope": "all"},
                     headers=READER).status_code == 400

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{console_server.url}/?page=topics#token=reader-tok")
        expect(page.locator("body")).to_have_attribute("data-loaded", "topics")
        expect(page.locator("#topics-table thead th").last).to_have_text("Throughput (last hour)")
        row = page.locator("#topics-table tbody tr", has_text="busy")
        sparks = row.locator("td.throughput .spark")
        expect(sparks).to_have_count(2)
        expect(sparks.nth(0).locator("svg polyline")).to_have_count(1)
        assert [sparks.nth(i).get_attribute("data-kind") for i in range(2)] == ["messages", "bytes"]
        assert float(sparks.nth(0).get_attribute("data-peak") or 0) > 0
        expect(sparks.nth(0).locator(".spark-rate")).to_contain_text("msg/s")
        expect(sparks.nth(1).locator(".spark-rate")).to_contain_text("/s")
        expect(page.locator("#topics-table tbody tr", has_text="idle").locator("td.throughput")).to_have_text(
            "no appends here in the last hour")
        page.screenshot(path=str(artifacts_dir / "console-throughput-topics.png"), full_page=True)
        page.click("#nav-nodes")
        expect(page.locator("body")).to_have_attribute("data-loaded", "nodes")
        node_sparks = page.locator("#nodes-table tbody tr").first.locator("td.throughput .spark")
        expect(node_sparks).to_have_count(2)
        assert float(node_sparks.nth(0).get_attribute("data-peak") or 0) > 0
        page.screenshot(path=str(artifacts_dir / "console-throughput-nodes.png"), full_page=True)
    finally:
        page.close()
