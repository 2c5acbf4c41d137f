"""The console's Index page shows the index tiers (files, bytes and items per merge tier), the key filters
(held, bytes against their bound, files skipped and read) and the merge progress (backlog, merges, the last
one), from GET /v1/admin/index/status of a real `mqindex serve` (read scope), in headless Chromium.
Screenshots go to the test artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, expect

from tests.api import test_web_page as web
from tests.api.server import ADMIN, READER, ServerProcess

browser = web.browser  # the module-scoped headless Chromium fixture
def status(console_server: ServerProcess) -> dict[str, Any]:
    r = httpx.get(f"{console_server.url}/v1/admin/index/status", headers=READER, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def lookup(console_server: ServerProcess, key: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{console_server.url}/v1/messages", params={"topic": "indexed", "key": key}, headers=READER,
                  timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["messages"]  # type: ignore[no-any-return]


def test_index_page_shows_tiers_filters_and_merging(console_server: ServerProcess, browser: Browser,
                                                   artifacts_dir: Path) -> None:
    url = console_server.url
    empty = status(console_server)
    assert [t["tier"] for t in empty["tiers"]] == [0, 1, 2]  # as written, then the day and week tiers
    assert [t["span_ms"] for t in empty["tiers"]] == [None, 86_400_000, 604_800_000]
    assert (empty["merging"]["backlog_files"], empty["merging"]["merges"], empty["merging"]["last_merge_ms"]) == (
        0, 0, None)
    assert httpx.get(f"{url}/v1/admin/index/status", timeout=30).status_code == 401

    assert httpx.post(f"{url}/v1/topics", json={"name": "indexed", "partitions": 1}, headers=ADMIN).status_code == 201
    for batch in range(2):  # two sealed files
        r = httpx.post(f"{url}/v1/topics/indexed/messages", headers=ADMIN, timeout=30,
                       json={"messages": [{"key": f"k{batch}-{i}", "value": "v"} for i in range(50)]})
        assert r.status_code == 200, r.text
        r = httpx.post(f"{url}/v1/admin/index/roll", headers=ADMIN, timeout=60)
        assert r.status_code == 200 and r.json()["rolled"], r.text
    assert httpx.post(f"{url}/v1/admin/index/maintain", headers=ADMIN, timeout=60).status_code == 200
    assert len(lookup(console_server, "k1-7")) == 1
    assert lookup(console_server, "no-such-key") == []

    body = status(console_server)
    tier0 = body["tiers"][0]
    sealed = sum(n for state, n in tier0["states"].items() if state != "WRITING")
    assert sealed == 2 and tier0["items"] >= 100 and tier0["bytes"] > 0
    f = body["filters"]
    assert f["enabled"] and f["answers_no"] >= 2 and f["answers_maybe"] >= 1  # the absent key skipped both files
    assert 0 < f["bytes_held"] <= f["max_bytes"] and f["held"] >= 1

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{url}/?page=index#token=reader-tok")
        expect(page.locator("body")).to_have_attribute("data-loaded", "index")
        expect(page.locator("#index-error")).to_have_text("")
        rows = page.locator("#index-tiers tbody tr")
        expect(rows).to_have_count(3)
        first = rows.nth(0).locator("td")
        expect(first.nth(0)).to_have_text("0")
        expect(first.nth(1)).to_have_text("as written")
        expect(first.nth(4)).to_have_text(str(tier0["items"]))
        expect(rows.nth(1).locator("td").nth(1)).to_have_text("1 day(s)")
        expect(rows.nth(2).locator("td").nth(1)).to_have_text("1 week(s)")
        expect(page.locator("#filters-no b")).to_have_text(str(f["answers_no"]))
        expect(page.locator("#filters-maybe b")).to_have_text(str(f["answers_maybe"]))
        expect(page.locator("#filters-bytes")).to_contain_text("of 64.0 MiB")
        expect(page.locator("#merge-backlog b")).to_have_text("0 file(s)")
        expect(page.locator("#merge-last b")).to_have_text("none yet")
        page.screenshot(path=str(artifacts_dir / "console-index-tiers-filters-merging.png"), full_page=True)
    finally:
        page.close()
