"""The console's Moves page lists the partition moves the cluster recorded (GET /v1/cluster/moves), newest first,
with their kind, reason, source, target and duration, and filters them by kind: two real `mqindex serve` nodes,
headless Chromium. A screenshot goes to the test artifacts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api import test_web_page as web
from tests.cluster.harness import TOPIC, Cluster, wait_until

browser = web.browser  # the module-scoped headless Chromium fixture


@pytest.fixture
def two(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", f"moves-page-{uuid.uuid4().hex[:8]}"), pg_url())
    try:
        for i in range(2):
            c.start(i)
        yield c
    finally:
        c.stop_all()


def test_moves_page_lists_recorded_moves_newest_first_and_filters_by_kind(two: Cluster, browser: Browser,
                                                                         artifacts_dir: Path) -> None:
    c = two
    r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60)
    assert r.status_code == 201, r.text
    wait_until(lambda: sum(len(p) for p in c.leaders().values()) == 2, 30, "both partitions led")
    led = {int(p.rsplit("-", 1)[1]): n for n, ps in c.leaders().items() for p in ps}
    for to in (1 - led[0], led[0]):  # partition 0 away and back
        r = httpx.post(f"{c.url(0)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": 0, "to": to},
                       timeout=120)
        assert r.status_code == 200 and not r.json()["unchanged"], r.text
    moves = httpx.get(f"{c.url(1)}/v1/cluster/moves", timeout=30).json()["moves"]
    assert [(m["kind"], m["from"], m["to"]) for m in moves] == [
        ("reassign", 1 - led[0], led[0]), ("reassign", led[0], 1 - led[0])]  # newest first

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{c.url(1)}/?page=moves")
        expect(page.locator("body")).to_have_attribute("data-loaded", "moves")
        expect(page.locator("#nav-moves")).to_have_attribute("aria-current", "page")
        expect(page.locator("#moves-error")).to_have_text("")
        rows = page.locator("#moves-table tbody tr")
        expect(rows).to_have_count(2)
        for row, m in zip([rows.nth(0), rows.nth(1)], moves, strict=True):
            cells = row.locator("td")
            expect(cells.nth(1)).to_have_text(f"{TOPIC}-0")
            expect(cells.nth(2)).to_have_text(str(m["from"]))
            expect(cells.nth(3)).to_have_text(str(m["to"]))
            expect(cells.nth(4)).to_have_text("reassign")
            expect(cells.nth(5)).to_have_text("requested")
            expect(cells.nth(7)).to_have_text("0")  # asked of node 0
            expect(cells.nth(8)).to_have_text(f"{m['seconds']:.3f} s")
        expect(page.locator("#moves-summary")).to_have_text("2 move(s) recorded, 0 by the balancer")
        page.screenshot(path=str(artifacts_dir / "console-moves.png"), full_page=True)

        page.select_option("#moves-kind", "auto")  # the balancer made none
        expect(page.locator("#moves-empty")).to_be_visible()
        expect(rows).to_have_count(0)
        page.select_option("#moves-kind", "reassign")
        expect(rows).to_have_count(2)
        expect(page.locator("#moves-empty")).to_be_hidden()
    finally:
        page.close()
