"""The console's Value search page in headless Chromium over a real `mqindex serve` (searches on local Spark in the
serving process), with a read-only token: a predicate search shows its progress and streams exactly the matching
messages into the table; a slow search is cancelled with the Cancel button and Spark reports its job cancelled.
Screenshots go to the test artifacts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from jobs.value_search import SearchSpec, plan_search
from tests.api import test_web_page as web
from tests.api.server import ADMIN, READER, TOKENS, ServerProcess, wait_for
from tests.api.test_searches import SLOW

browser = web.browser  # the module-scoped headless Chromium fixture
TOPIC, N = "payments", 200
LONG_MS = 600_000  # the first search starts the node's Spark session: minutes on a loaded machine


def value(i: int) -> str:
    return json.dumps({"n": i, "status": "failed" if i % 9 == 0 else "ok"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("console-search")
    s = ServerProcess(d / "node", "--kafka-listener", "", "--upload-interval-s", "0.2", env=TOKENS).start()
    try:
        r = httpx.post(f"{s.url}/v1/topics", json={"name": TOPIC, "partitions": 2}, headers=ADMIN)
        assert r.status_code == 201, r.text
        r = httpx.post(f"{s.url}/v1/topics/{TOPIC}/messages", headers=ADMIN, timeout=60,
                       json={"messages": [{"key": f"p{i}", "value": value(i)} for i in range(N)]})
        assert r.status_code == 200, r.text
        spec = SearchSpec(TOPIC, f"sqlite:///{d / 'node' / 'metadata.sqlite'}", f"file://{d / 'node' / 'objects'}")
        wait_for("every record uploaded",
                 lambda: sum(r.committed_end for r in plan_search(spec).plan.ranges) == N, timeout=60, interval=0.3)
        yield s
    finally:
        s.stop()


def test_value_search_page_shows_matches_and_cancels(server: ServerProcess, browser: Browser,
                                                      artifacts_dir: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{server.url}/?page=values#token=reader-tok")
        expect(page.locator("body")).to_have_attribute("data-loaded", "values")
        page.fill("#vs-topic", TOPIC)
        page.fill("#vs-where", "value LIKE '%\"failed\"%'")
        page.click("#vs-start")
        expect(page.locator("body")).to_have_attribute("data-search", "done", timeout=LONG_MS)
        want = sorted(f"p{i}" for i in range(N) if i % 9 == 0)
        rows = page.locator("#vs-results tbody tr")
        expect(rows).to_have_count(len(want))
        assert sorted(rows.locator("td:nth-child(4)").all_text_contents()) == want
        assert set(rows.locator("td.preview").all_text_contents()) == {value(int(k[1:])) for k in want}
        expect(page.locator("#vs-state")).to_contain_text("done · ")
        expect(page.locator("#vs-state")).to_contain_text(f"{len(want)} match(es)")
        expect(page.locator("#vs-cancel")).to_be_disabled()
        rows.first.click()  # the message's detail, as the key search shows it
        expect(page.locator("#detail-value")).to_have_text(re.compile(r'"status": "failed"'))
        page.screenshot(path=str(artifacts_dir / "console-value-search-done.png"), full_page=True)

        page.fill("#vs-where", SLOW)
        page.click("#vs-start")
        expect(page.locator("#vs-state")).to_contain_text("1 task(s) running", timeout=LONG_MS)
        expect(page.locator("#vs-cancel")).to_be_enabled()
        page.screenshot(path=str(artifacts_dir / "console-value-search-running.png"), full_page=True)
        page.click("#vs-cancel")
        expect(page.locator("body")).to_have_attribute("data-search", "cancelled", timeout=120_000)
        expect(page.locator("#vs-results tbody tr")).to_have_count(0)
        expect(page.locator("#vs-recent tbody tr")).to_have_count(2)
        page.screenshot(path=str(artifacts_dir / "console-value-search-cancelled.png"), full_page=True)
    finally:
        page.close()
    # Spark's own record of the cancelled search's job group
    searches = httpx.get(f"{server.url}/v1/searches", headers=READER, timeout=60).json()["searches"]
    assert [s["state"] for s in searches] == ["cancelled", "done"]
    spark = searches[0]["spark"]
    assert spark["jobs_failed"] >= 1 and spark["jobs_active"] == 0 and spark["tasks_running"] == 0, spark
