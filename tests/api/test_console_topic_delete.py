"""The console's Delete action on the Topics page, in headless Chromium over a real `mqindex serve`: the
confirmation dialog names the topic, cancelling it deletes nothing, accepting it deletes the topic (gone from
the page and the server) and leaves the others; a read-only token is refused. Screenshots go to the test
artifacts."""

from __future__ import annotations

from pathlib import Path

import httpx
from playwright.sync_api import Browser, Dialog, expect

from tests.api import test_web_page as web
from tests.api.server import ServerProcess
from tests.api.test_console import ADMIN, TOKENS, open_page

browser = web.browser  # the module-scoped headless Chromium fixture


def test_console_delete_topic_with_confirmation(tmp_path: Path, browser: Browser, artifacts_dir: Path) -> None:
    server = ServerProcess(tmp_path / "data", env=TOKENS).start()
    try:
        url = server.url
        for name, n in (("orders", 3), ("audit", 1)):
            r = httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": n}, headers=ADMIN)
            assert r.status_code == 201, r.text
        r = httpx.post(f"{url}/v1/topics/orders/messages", headers=ADMIN,
                       json={"messages": [{"key": f"k{i}", "value": f"v{i}"} for i in range(12)]})
        assert r.status_code == 200, r.text

        # a read-only token: the button is disabled; forced, the server refuses and nothing is deleted
        page = open_page(browser, url, "topics", "reader-tok")
        expect(page.locator("button.delete-topic[data-topic='orders']")).to_be_disabled()
        page.once("dialog", lambda d: d.accept())
        page.locator("button.delete-topic[data-topic='orders']").evaluate("b => { b.disabled = false; b.click(); }")
        expect(page.locator("#topics-error")).to_contain_text("403")
        assert httpx.get(f"{url}/v1/topics/orders", headers=ADMIN).status_code == 200
        page.screenshot(path=str(artifacts_dir / "console-delete-topic-read-only.png"), full_page=True)
        page.close()

        page = open_page(browser, url, "topics", "admin-tok")
        rows = page.locator("#topics-table tbody tr")
        expect(rows).to_have_count(2)
        expect(page.locator("#partitions-table tbody tr")).to_have_count(4)

        # cancelled: the dialog names the topic, nothing is deleted
        seen: list[str] = []

        def dismiss(d: Dialog) -> None:
            seen.append(d.message)
            d.dismiss()

        page.once("dialog", dismiss)
        page.click("button.delete-topic[data-topic='orders']")
        expect(rows).to_have_count(2)
        assert seen and "orders" in seen[0]
        assert httpx.get(f"{url}/v1/topics/orders", headers=ADMIN).status_code == 200

        # accepted: deleted on the server, gone from both tables, the other topic stays
        page.once("dialog", lambda d: d.accept())
        page.click("button.delete-topic[data-topic='orders']")
        expect(page.locator("#topics-ok")).to_contain_text("topic orders deleted (3 partition(s))")
        expect(rows).to_have_count(1)
        expect(rows.first.locator("td").first).to_have_text("audit")
        expect(page.locator("#partitions-table tbody tr")).to_have_count(1)
        assert httpx.get(f"{url}/v1/topics/orders", headers=ADMIN).status_code == 404
        assert httpx.get(f"{url}/v1/topics/audit", headers=ADMIN).status_code == 200
        page.screenshot(path=str(artifacts_dir / "console-delete-topic.png"), full_page=True)

        # the last one: the page says there are no topics
        page.once("dialog", lambda d: d.accept())
        page.click("button.delete-topic[data-topic='audit']")
        expect(page.locator("#topics-empty")).to_be_visible()
        expect(page.locator("#topics-error")).to_have_text("")
        page.close()
    finally:
        server.stop()
