"""The web console at / in headless Chromium (Debian's, driven by Playwright) over a real `mqindex serve`:
every page on an empty cluster, then with data, the admin actions with an admin token, and the error states
(a read-only token refused, bad input, the server gone). Screenshots go to the test artifacts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from playwright.sync_api import Browser, Page, Route, expect

from tests.api import test_web_page as web
from tests.api.server import ServerProcess

browser = web.browser  # the module-scoped headless Chromium fixture
TOKENS = {"MQINDEX_TOKENS": "admin-tok=read,produce,admin;reader-tok=read"}
ADMIN = {"Authorization": "Bearer admin-tok"}
PAGES = ("topics", "nodes", "objects", "index", "search")


def open_page(browser: Browser, url: str, page_name: str, token: str) -> Page:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{url}/?page={page_name}#token={token}")
    expect(page.locator("body")).to_have_attribute("data-loaded", page_name)
    return page


def goto(page: Page, name: str) -> None:
    page.click(f"#nav-{name}")
    expect(page.locator("body")).to_have_attribute("data-loaded", name)


def test_console_pages_empty_then_with_data_and_admin_actions(tmp_path: Path, browser: Browser,
                                                              artifacts_dir: Path) -> None:
    server = ServerProcess(tmp_path / "data", env=TOKENS).start()
    try:
        page = open_page(browser, server.url, "topics", "admin-tok")
        # -- an empty cluster: every page draws, says it is empty, shows no error
        expect(page.locator("#topics-empty")).to_be_visible()
        expect(page.locator("#partitions-table tbody tr")).to_have_count(0)
        page.screenshot(path=str(artifacts_dir / "console-empty-topics.png"), full_page=True)
        for name in PAGES[1:]:
            goto(page, name)
            expect(page.locator(f"#{name}-error" if name != "search" else "#error")).to_have_text("")
            page.screenshot(path=str(artifacts_dir / f"console-empty-{name}.png"), full_page=True)
        goto(page, "nodes")
        expect(page.locator("#nodes-table tbody tr")).to_have_count(1)
        expect(page.locator("#nodes-table tbody tr td").nth(1)).to_have_text("alive")
        goto(page, "index")
        expect(page.locator("#index-empty")).to_be_visible()
        goto(page, "objects")
        expect(page.locator("#compaction-last")).to_contain_text("no compaction run")

        # -- create a topic from the console (admin)
        goto(page, "topics")
        page.fill("#new-topic-name", "orders")
        page.fill("#new-topic-partitions", "3")
        page.click("#create-topic")
        expect(page.locator("#topics-ok")).to_contain_text("topic orders created with 3 partition(s)")
        expect(page.locator("#partitions-table tbody tr")).to_have_count(3)
        assert httpx.get(f"{server.url}/v1/topics/orders", headers=ADMIN).json()["partitions"] == 3

        msgs = [{"key": f"order-{i % 4}", "value": json.dumps({"order": i, "status": "paid"}),
                 "headers": {"source": "console-test"}, "partition": i % 3} for i in range(30)]
        r = httpx.post(f"{server.url}/v1/topics/orders/messages", json={"messages": msgs}, headers=ADMIN)
        assert r.status_code == 200, r.text
        ids = [x["msg_id"] for x in r.json()["results"]]

        goto(page, "topics")
        rows = page.locator("#partitions-table tbody tr")
        for p in range(3):  # leader node 0, leader epoch, offsets [0, 10) in each partition
            cells = rows.nth(p).locator("td")
            expect(cells.nth(0)).to_have_text("orders")
            expect(cells.nth(1)).to_have_text(str(p))
            expect(cells.nth(2)).to_have_text("0")
            expect(cells.nth(5)).to_have_text("0")
            expect(cells.nth(6)).to_have_text("10")
        expect(page.locator("#topics-table tbody tr td").nth(3)).to_have_text("30")
        page.screenshot(path=str(artifacts_dir / "console-topics.png"), full_page=True)

        # -- reassign to the node that leads already: answered with the leader epoch
        page.fill("#reassign-topic", "orders")
        page.fill("#reassign-partition", "1")
        page.fill("#reassign-to", "0")
        page.click("#reassign")
        expect(page.locator("#topics-ok")).to_contain_text("orders-1 is led by node 0")

        # -- run compaction from the Objects page (admin); the cycle shows as the last run
        goto(page, "objects")
        page.click("#run-compaction")
        expect(page.locator("#objects-ok")).to_contain_text("compaction ran")
        expect(page.locator("#compaction-runs")).to_have_text("1")
        expect(page.locator("#compaction-last")).to_contain_text("objects_in")
        page.screenshot(path=str(artifacts_dir / "console-objects.png"), full_page=True)

        # -- the index page lists the files holding the 30 records with their state and lag
        goto(page, "index")
        expect(page.locator("#index-table tbody tr").first).to_be_visible()
        items = sum(int(page.locator("#index-table tbody tr").nth(i).locator("td").nth(3).inner_text())
                    for i in range(page.locator("#index-table tbody tr").count()))
        assert items >= 30
        index_rows = page.locator("#index-table tbody tr")
        for i in range(index_rows.count()):  # a file still being written is not waiting for its upload
            cells = index_rows.nth(i).locator("td")
            if cells.nth(0).inner_text() == "WRITING":
                expect(cells.nth(4)).to_have_text("being written")
            else:
                assert cells.nth(4).inner_text() != "being written"
        assert page.locator("#index-table tbody tr", has_text="WRITING").count() >= 1
        page.screenshot(path=str(artifacts_dir / "console-index.png"), full_page=True)

        # -- search by key with paging, then the detail as text, JSON and hex
        goto(page, "search")
        page.fill("#topic", "orders")
        page.fill("#key", "order-1")
        page.fill("#max", "4")
        page.click("#search")
        results = page.locator("#results tbody tr")
        expect(results).to_have_count(4)
        page.click("#more")
        expect(results).to_have_count(8)
        expect(page.locator("#more")).to_be_hidden()
        page.locator("#results tbody tr", has_text=ids[5]).click()
        expect(page.locator("#detail-value")).to_have_text('{"order": 5, "status": "paid"}')
        expect(page.locator("#detail-headers")).to_contain_text("source: console-test")
        page.click("#view-json")
        expect(page.locator("#detail-value")).to_have_text('{\n  "order": 5,\n  "status": "paid"\n}')
        page.click("#view-hex")
        expect(page.locator("#detail-value")).to_have_text(" ".join(f"{b:02x}" for b in msgs[5]["value"].encode()))
        page.screenshot(path=str(artifacts_dir / "console-search-detail.png"), full_page=True)
        page.close()
    finally:
        server.stop()


def test_console_error_states(tmp_path: Path, browser: Browser, artifacts_dir: Path) -> None:
    server = ServerProcess(tmp_path / "data", env=TOKENS).start()
    try:
        # a read-only token sees the pages with the admin actions disabled; the server refuses them anyway
        page = open_page(browser, server.url, "topics", "reader-tok")
        page.fill("#new-topic-name", "nope")
        expect(page.locator("#create-topic")).to_be_disabled()
        page.locator("#create-topic-form").evaluate("f => f.requestSubmit()")  # forced past the disabled button
        expect(page.locator("#topics-error")).to_contain_text("403")
        assert httpx.get(f"{server.url}/v1/topics", headers=ADMIN).json() == []
        goto(page, "objects")
        expect(page.locator("#run-compaction")).to_be_disabled()
        page.screenshot(path=str(artifacts_dir / "console-error-read-only.png"), full_page=True)
        page.close()

        # no token at all: every page says so instead of drawing stale or empty tables
        page = open_page(browser, server.url, "topics", "")
        expect(page.locator("#topics-error")).to_contain_text("401")
        for name in PAGES[1:4]:
            goto(page, name)
            expect(page.locator(f"#{name}-error")).to_contain_text("401")
        page.close()

        # bad input from an admin: the field is named; reassigning to a node that does not exist is refused
        page = open_page(browser, server.url, "topics", "admin-tok")
        page.fill("#new-topic-name", "bad name!")
        page.click("#create-topic")
        expect(page.locator("#topics-error")).to_contain_text("name")
        page.fill("#reassign-topic", "missing")
        page.click("#reassign")
        expect(page.locator("#topics-error")).to_contain_text("missing")
        page.screenshot(path=str(artifacts_dir / "console-error-bad-input.png"), full_page=True)

        # the server gone: the page says the server does not answer
        server.stop()
        goto(page, "nodes")
        expect(page.locator("#nodes-error")).to_contain_text("does not answer")
        page.screenshot(path=str(artifacts_dir / "console-error-server-down.png"), full_page=True)
        page.close()
    finally:
        server.stop()


def test_console_admin_actions_follow_the_tokens_scopes(tmp_path: Path, browser: Browser) -> None:
    server = ServerProcess(tmp_path / "data", env=TOKENS).start()
    try:
        assert httpx.post(f"{server.url}/v1/topics", json={"name": "orders", "partitions": 1},
                          headers=ADMIN).status_code == 201
        page = open_page(browser, server.url, "topics", "reader-tok")
        admin_buttons = ["#create-topic", "#reassign", "button.delete-topic[data-topic='orders']"]
        for sel in admin_buttons:
            expect(page.locator(sel)).to_be_disabled()
            expect(page.locator(sel)).to_have_attribute("title", "needs a token with the admin scope")
        goto(page, "objects")
        expect(page.locator("#run-compaction")).to_be_disabled()
        # the same page with an admin token entered: the actions are enabled
        page.fill("#token", "admin-tok")
        page.dispatch_event("#token", "change")
        expect(page.locator("#run-compaction")).to_be_enabled()
        goto(page, "topics")
        for sel in admin_buttons:
            expect(page.locator(sel)).to_be_enabled()
        page.close()
    finally:
        server.stop()


def test_a_page_left_before_its_answer_came_does_not_mark_itself_drawn(tmp_path: Path, browser: Browser) -> None:
    """The objects page asked again (as entering a token does), then Topics clicked before its answer came: once
    that answer is in, the page shown (and marked drawn, which every console test waits on) is still Topics."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        page = open_page(browser, server.url, "objects", "")
        held: list[Route] = []
        # the answer waits until the test lets it through
        page.route("**/v1/console/objects", lambda route: held.append(route))
        page.click("#nav-objects")
        page.wait_for_function("() => document.body.dataset.loaded === ''")
        deadline = time.monotonic() + 10
        while not held:
            assert time.monotonic() < deadline, "the objects page did not ask for its data"
            page.wait_for_timeout(20)
        goto(page, "topics")
        page.evaluate("() => { document.getElementById('compaction-last').textContent = ''; }")
        for route in held:
            route.continue_()
        # the objects page drew its late answer (in its hidden section), and its show() has ended
        page.wait_for_function("() => document.getElementById('compaction-last').textContent !== ''")
        page.evaluate("() => new Promise((done) => setTimeout(done, 0))")
        expect(page.locator("body")).to_have_attribute("data-loaded", "topics")
        expect(page.locator("#nav-topics")).to_have_attribute("aria-current", "page")
        page.close()
    finally:
        server.stop()


def test_console_success_and_error_messages_show_in_one_place(tmp_path: Path, browser: Browser) -> None:
    server = ServerProcess(tmp_path / "data", env=TOKENS).start()
    try:
        page = open_page(browser, server.url, "topics", "admin-tok")
        page.fill("#new-topic-name", "bad name!")
        page.click("#create-topic")
        error = page.locator("#topics-error")
        expect(error).to_contain_text("name")
        error_box = error.bounding_box()
        page.fill("#new-topic-name", "orders")
        page.click("#create-topic")
        ok = page.locator("#topics-ok")
        expect(ok).to_contain_text("topic orders created")
        expect(error).to_be_hidden()  # the success replaces the error, in the same place
        ok_box = ok.bounding_box()
        assert error_box is not None and ok_box is not None
        assert abs(ok_box["y"] - error_box["y"]) < 2 and abs(ok_box["x"] - error_box["x"]) < 2, (error_box, ok_box)
        # and an error after a success replaces it there too
        page.fill("#reassign-topic", "missing")
        page.click("#reassign")
        expect(error).to_contain_text("missing")
        expect(ok).to_be_hidden()
        box = error.bounding_box()
        assert box is not None and abs(box["y"] - ok_box["y"]) < 2
        page.close()
    finally:
        server.stop()


def test_console_search_says_what_to_enter_and_previews_values(tmp_path: Path, browser: Browser) -> None:
    server = ServerProcess(tmp_path / "data", env=TOKENS).start()
    try:
        assert httpx.post(f"{server.url}/v1/topics", json={"name": "orders", "partitions": 1},
                          headers=ADMIN).status_code == 201
        long_value = "x" * 200
        msgs = [{"key": "k1", "value": '{"status":"paid"}'}, {"key": "k1", "value": long_value},
                {"key": "k1", "value": "AAH+/w==", "encoding": "base64"}]
        r = httpx.post(f"{server.url}/v1/topics/orders/messages", json={"messages": msgs}, headers=ADMIN)
        assert r.status_code == 200, r.text
        ids = [x["msg_id"] for x in r.json()["results"]]

        page = open_page(browser, server.url, "search", "reader-tok")
        page.click("#search")  # nothing entered: the page says what to enter
        expect(page.locator("#error")).to_have_text(
            "Enter a topic and a key to search by key (or a message id below to look one up).")
        page.fill("#topic", "orders")
        page.click("#search")
        expect(page.locator("#error")).to_contain_text("Enter a key to search by key")
        page.click("#lookup")
        expect(page.locator("#error")).to_contain_text("Enter a message id (32 hex characters")

        page.fill("#key", "k1")
        page.click("#search")
        expect(page.locator("#error")).to_have_text("")
        expect(page.locator("#results thead th").nth(5)).to_have_text("Value")
        row = {i: page.locator("#results tbody tr", has_text=ids[i]).locator("td").nth(5) for i in range(3)}
        expect(row[0]).to_have_text('{"status":"paid"}')
        expect(row[1]).to_have_text("x" * 80 + "\u2026")
        expect(row[2]).to_have_text("(binary, 4 bytes)")
        page.close()
    finally:
        server.stop()
