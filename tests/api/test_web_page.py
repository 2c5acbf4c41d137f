"""The lookup page at / in headless Chromium (Debian's, driven by Playwright): search by key with paging,
look up by id, open a message's detail. A screenshot goes to the test artifacts."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from tests.api.server import ServerProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is needed for the web page tests: apt-get install chromium (make test does it)",
                    pytrace=False)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


def test_search_page_detail(tmp_path: Path, browser: Browser, artifacts_dir: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        url = server.url
        assert httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
        msgs = [{"key": "order-42", "value": f"status {i}", "headers": {"source": "web-test"}} for i in range(12)]
        msgs.append({"key": "order-42", "value": base64.b64encode(b"\x00\x01\xfe\xff").decode(), "encoding": "base64"})
        msgs.append({"key": "other", "value": "not me"})
        r = httpx.post(f"{url}/v1/topics/orders/messages", json={"messages": msgs})
        assert r.status_code == 200
        results = r.json()["results"]

        page = browser.new_page()
        page.goto(url + "/")
        page.fill("#topic", "orders")
        page.fill("#key", "order-42")
        page.fill("#max", "5")
        page.click("#search")
        rows = page.locator("#results tbody tr")
        expect(rows).to_have_count(5)
        # paging goes on past the first page, with no cap, until all 13 are shown
        page.click("#more")
        expect(rows).to_have_count(10)
        page.click("#more")
        expect(rows).to_have_count(13)
        expect(page.locator("#more")).to_be_hidden()
        shown_ids = [rows.nth(i).locator("td").first.inner_text() for i in range(13)]
        assert set(shown_ids) == {res["msg_id"] for res in results[:13]}
        assert all(rows.nth(i).locator("td").nth(3).inner_text() == "order-42" for i in range(13))

        # the binary message's detail is shown in hex
        binary_id = results[12]["msg_id"]
        page.locator("#results tbody tr", has_text=binary_id).click()
        expect(page.locator("#detail-value")).to_have_text("00 01 fe ff")
        # a text message's detail shows headers and value
        page.locator("#results tbody tr", has_text=results[3]["msg_id"]).click()
        expect(page.locator("#detail-value")).to_have_text("status 3")
        expect(page.locator("#detail-headers")).to_contain_text("source: web-test")
        page.screenshot(path=str(artifacts_dir / "web-lookup-by-key.png"), full_page=True)

        # lookup by id, and a clear error for a malformed one
        page.fill("#msgid", results[5]["msg_id"])
        page.click("#lookup")
        expect(rows).to_have_count(1)
        expect(page.locator("#detail-value")).to_have_text("status 5")
        page.fill("#msgid", "not-an-id")
        page.click("#lookup")
        expect(page.locator("#error")).to_contain_text("msg_id")
        page.screenshot(path=str(artifacts_dir / "web-lookup-by-id-error.png"), full_page=True)
    finally:
        server.stop()
