"""The console's Groups view, message browser (paging, a time, the newest N, live tail, copy as JSON), produce form
and topic detail in headless Chromium (Debian's, driven by Playwright) over one real `mqindex serve` with its Kafka
listener: a confluent-kafka consumer group commits offsets and the view shows its lag; a read-only token sees every
view with the actions disabled. Screenshots go to the test artifacts."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer
from playwright.sync_api import Browser, Page, expect

from tests.api import test_web_page as web
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess

browser = web.browser  # the module-scoped headless Chromium fixture
ADMIN_TOKEN, PRODUCER_TOKEN, READER_TOKEN = "admin-tok-console", "producer-tok-console", "reader-tok-console"
TOKENS = {"MQINDEX_TOKENS": f"{ADMIN_TOKEN}=read,produce,admin;{PRODUCER_TOKEN}=read,produce;{READER_TOKEN}=read"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(Path(tmp_path_factory.mktemp("console-views")) / "node", env=TOKENS).start()
    try:
        yield s
    finally:
        s.stop()


def api(server: KafkaServerProcess, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, server.url + path, headers=ADMIN, timeout=30, **kw)
    assert r.status_code in (200, 201), r.text
    return r.json()


def produce(server: KafkaServerProcess, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return api(server, "POST", f"/v1/topics/{topic}/messages", json={"messages": messages})["results"]  # type: ignore


def open_page(browser: Browser, url: str, query: str, token: str, loaded: str) -> Page:
    context = browser.new_context(viewport={"width": 1400, "height": 1000},
                                  permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.goto(f"{url}/?{query}#token={token}")
    expect(page.locator("body")).to_have_attribute("data-loaded", loaded)
    return page


def cells(page: Page, table: str) -> list[list[str]]:
    rows = page.locator(f"#{table} tbody tr")
    return [[c.inner_text() for c in rows.nth(i).locator("td").all()] for i in range(rows.count())]


def shown_offsets(page: Page) -> list[tuple[int, int]]:
    return [(int(r[0]), int(r[1])) for r in cells(page, "browse-table")]


def test_groups_view_shows_members_and_lag_and_resets_offsets_after_a_dry_run(
        server: KafkaServerProcess, browser: Browser, artifacts_dir: Path) -> None:
    api(server, "POST", "/v1/topics", json={"name": "console-groups", "partitions": 2})
    produce(server, "console-groups", [{"value": f"m{i}", "partition": i % 2} for i in range(10)])
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "token", "sasl.password": ADMIN_TOKEN,
                         "group.id": "console-watch", "client.id": "watcher", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    try:
        consumer.subscribe(["console-groups"])
        nxt: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while sum(1 for _ in nxt) < 2 or sum(nxt.values()) < 3:  # some of each partition, 3 or more in all
            assert time.monotonic() < deadline, f"consumed only {nxt}"
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                nxt[m.partition()] = m.offset() + 1
        consumer.commit(asynchronous=False)
        lag = {p: 5 - nxt[p] for p in (0, 1)}

        page = open_page(browser, server.url, "page=groups", ADMIN_TOKEN, "groups")
        row = page.locator("#groups-table tbody tr", has_text="console-watch")
        expect(row.locator("td").nth(1)).to_have_text("Stable")
        expect(row.locator("td").nth(3)).to_have_text("1")  # members
        expect(row.locator("td").nth(4)).to_have_text("0")  # coordinator node
        expect(row.locator("td").nth(5)).to_have_text(str(sum(lag.values())))
        row.locator("a").click()
        expect(page.locator("#group-detail")).to_be_visible()
        expect(page.locator("#group-members tbody tr td").nth(1)).to_have_text("watcher")
        expect(page.locator("#group-offsets tbody tr")).to_have_count(2)
        for r in cells(page, "group-offsets"):
            p = int(r[1])
            assert r[0] == "console-groups" and r[2:5] == [str(nxt[p]), "5", str(lag[p])], r
            assert r[6] == "watcher" and (r[5] != "0") == (lag[p] > 0), r  # the age of the oldest unconsumed
        page.screenshot(path=str(artifacts_dir / "console-groups-lag.png"), full_page=True)

        # a dry run is allowed while the group runs; applying it is refused (409) and shown
        page.select_option("#reset-to", "earliest")
        page.click("#reset-preview")
        expect(page.locator("#groups-ok")).to_contain_text("dry run")
        expect(page.locator("#reset-plan tbody tr")).to_have_count(2)
        page.click("#reset-apply")
        expect(page.locator("#groups-error")).to_contain_text("409")
    finally:
        consumer.close()

    # the group stopped: the preview lists the moves, Apply stores them, the view shows the lag from offset 0
    wait_for("the group has no members", lambda: api(server, "GET", "/v1/groups/console-watch")["members"] == 0)
    page.click("#nav-groups")
    expect(page.locator("body")).to_have_attribute("data-loaded", "groups")
    page.select_option("#reset-to", "offset")
    page.fill("#reset-value", "1")
    expect(page.locator("#reset-apply")).to_be_disabled()
    page.click("#reset-preview")
    expect(page.locator("#reset-plan tbody tr")).to_have_count(2)
    for i in range(2):  # the new preview replaced the one made while the group ran (its rows end in 0)
        expect(page.locator("#reset-plan tbody tr").nth(i).locator("td").nth(3)).to_have_text("1")
    assert sorted((int(r[1]), r[2], r[3]) for r in cells(page, "reset-plan")) == [
        (p, str(nxt[p]), "1") for p in (0, 1)]
    assert {r["partition"]: r["committed_offset"]  # nothing stored by the dry run
            for r in api(server, "GET", "/v1/groups/console-watch")["offsets"]} == nxt
    page.screenshot(path=str(artifacts_dir / "console-groups-reset-preview.png"), full_page=True)
    page.click("#reset-apply")
    expect(page.locator("#groups-ok")).to_contain_text("offsets of console-watch reset on 2 partition(s)")
    expect(page.locator("#group-offsets tbody tr td").nth(4)).to_have_text("4")
    assert {(r["partition"], r["committed_offset"], r["lag"])
            for r in api(server, "GET", "/v1/groups/console-watch")["offsets"]} == {(0, 1, 4), (1, 1, 4)}
    page.screenshot(path=str(artifacts_dir / "console-groups-reset-applied.png"), full_page=True)
    page.context.close()


def test_message_browser_pages_by_offset_time_and_newest_and_tails_new_messages(
        server: KafkaServerProcess, browser: Browser, artifacts_dir: Path) -> None:
    api(server, "POST", "/v1/topics", json={"name": "console-browse", "partitions": 2})
    first = produce(server, "console-browse", [
        {"key": f"k{i}", "value": json.dumps({"n": i}), "headers": {"seq": str(i)}, "partition": i % 2}
        for i in range(20)])
    wait_for("the clock moves past the first batch's store time",
             lambda: time.time() * 1000 > first[-1]["timestamp"] + 5)
    later = produce(server, "console-browse", [{"key": f"late{i}", "value": f"late {i}", "partition": i % 2}
                                               for i in range(4)])
    assert later[0]["timestamp"] > first[-1]["timestamp"]

    page = open_page(browser, server.url, "page=topic&topic=console-browse", ADMIN_TOKEN, "topic")
    # topic detail: each partition's offsets, leader and bytes; the configs
    expect(page.locator("#topic-partitions tbody tr")).to_have_count(2)
    assert [r[:4] for r in cells(page, "topic-partitions")] == [["0", "0", "12", "0"], ["1", "0", "12", "0"]]
    expect(page.locator("#topic-configs")).to_contain_text("retention.ms")
    # the default view: the newest 20 of all partitions, the 4 later ones last
    expect(page.locator("#browse-table tbody tr")).to_have_count(20)
    assert {r[3] for r in cells(page, "browse-table")[-4:]} == {"late0", "late1", "late2", "late3"}

    # one partition from an offset, page by page, and back
    page.select_option("#browse-partition", "0")
    page.select_option("#browse-from", "offset")
    page.fill("#browse-at", "0")
    page.fill("#browse-n", "5")
    page.click("#browse")
    expect(page.locator("#browse-status")).to_contain_text("partition 0 offsets 0-4")
    assert shown_offsets(page) == [(0, o) for o in range(5)]
    expect(page.locator("#browse-prev")).to_be_disabled()
    page.click("#browse-next")
    expect(page.locator("#browse-status")).to_contain_text("partition 0 offsets 5-9")
    page.click("#browse-next")
    expect(page.locator("#browse-status")).to_contain_text("partition 0 offsets 10-11")
    assert [r[3] for r in cells(page, "browse-table")] == ["late0", "late2"]
    expect(page.locator("#browse-next")).to_be_disabled()
    page.click("#browse-prev")
    expect(page.locator("#browse-status")).to_contain_text("partition 0 offsets 5-9")
    assert shown_offsets(page) == [(0, o) for o in range(5, 10)]

    # all partitions from a time: the later batch only
    page.select_option("#browse-partition", "all")
    page.select_option("#browse-from", "time")
    page.fill("#browse-at", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(later[0]["timestamp"] // 1000))
              + f".{later[0]['timestamp'] % 1000:03d}Z")
    page.fill("#browse-n", "10")
    page.click("#browse")
    expect(page.locator("#browse-status")).to_contain_text("4 message(s)")
    assert sorted(shown_offsets(page)) == [(0, 10), (0, 11), (1, 10), (1, 11)]
    # the newest 4 of all partitions: the later batch; the newest 3 of partition 1, then the 3 before them
    page.select_option("#browse-from", "newest")
    page.fill("#browse-n", "4")
    page.click("#browse")
    expect(page.locator("#browse-status")).to_contain_text("4 message(s)")
    assert sorted(shown_offsets(page)) == [(0, 10), (0, 11), (1, 10), (1, 11)]
    page.select_option("#browse-partition", "1")
    page.fill("#browse-n", "3")
    page.click("#browse")
    expect(page.locator("#browse-status")).to_contain_text("partition 1 offsets 9-11")
    assert [r[3] for r in cells(page, "browse-table")] == ["k19", "late1", "late3"]
    page.click("#browse-prev")
    expect(page.locator("#browse-status")).to_contain_text("partition 1 offsets 6-8")
    assert [r[3] for r in cells(page, "browse-table")] == ["k13", "k15", "k17"]

    # a message's detail: key, headers, value as JSON and hex; copy as JSON
    page.locator("#browse-table tbody tr", has_text="k15").click()
    expect(page.locator("#detail-meta")).to_contain_text("key k15")
    expect(page.locator("#detail-headers")).to_have_text("seq: 15")
    page.click("#view-json")
    expect(page.locator("#detail-value")).to_have_text('{\n  "n": 15\n}')
    page.click("#view-hex")
    expect(page.locator("#detail-value")).to_have_text(" ".join(f"{b:02x}" for b in b'{"n": 15}'))
    page.click("#detail-copy")
    expect(page.locator("#detail-copied")).to_have_text("copied")
    copied = json.loads(page.evaluate("navigator.clipboard.readText()"))
    assert (copied["key"], copied["partition"], copied["offset"], copied["value"], copied["headers"]) == (
        "k15", 1, 7, '{"n": 15}', {"seq": "15"})
    page.screenshot(path=str(artifacts_dir / "console-browser-detail.png"), full_page=True)

    # live tail of all partitions: a message produced now shows within 2 s
    page.select_option("#browse-partition", "all")
    page.click("#browse-tail")
    expect(page.locator("#browse-tail")).to_have_attribute("aria-pressed", "true")
    for i in range(2):
        produce(server, "console-browse", [{"key": f"tail{i}", "value": f"followed {i}", "partition": i}])
        started = time.monotonic()
        expect(page.locator("#browse-table tbody tr", has_text=f"followed {i}")).to_be_visible(timeout=2000)
        assert time.monotonic() - started < 2
    assert [r[3] for r in cells(page, "browse-table")][-2:] == ["tail0", "tail1"]
    page.screenshot(path=str(artifacts_dir / "console-browser-tail.png"), full_page=True)
    page.click("#browse-tail")
    expect(page.locator("#browse-tail")).to_have_attribute("aria-pressed", "false")
    page.context.close()


def test_paging_all_partitions_is_one_request_a_page_and_shows_each_message_once(
        server: KafkaServerProcess, browser: Browser, artifacts_dir: Path) -> None:
    """Next and previous over every partition of a 6-partition topic, and "from a time": each click is one POST
    /v1/console/page (no read per partition from the browser); next pages until the last show every message once,
    oldest first, and previous comes back to the first page."""
    api(server, "POST", "/v1/topics", json={"name": "console-paged", "partitions": 6})
    for i in range(3):  # 3 requests of 9 messages, over the partitions unevenly
        produce(server, "console-paged", [{"key": f"b{i}m{j}", "value": f"v{i}-{j}", "partition": (i + j * j) % 6}
                                          for j in range(9)])
    stored = []
    for p in range(6):
        stored += [(m["timestamp"], p, m["offset"]) for m in
                   api(server, "GET", f"/v1/topics/console-paged/partitions/{p}/messages?offset=0&max=100")["messages"]]
    page = open_page(browser, server.url, "page=topic&topic=console-paged", ADMIN_TOKEN, "topic")
    expect(page.locator("#topic-partitions tbody tr")).to_have_count(6)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(f"{r.method} {r.url}"))
    page.select_option("#browse-from", "offset")
    page.fill("#browse-at", "0")
    page.fill("#browse-n", "5")
    page.click("#browse")
    expect(page.locator("#browse-status")).to_contain_text("5 message(s)")
    seen = [shown_offsets(page)]
    status = page.locator("#browse-status")
    while not page.locator("#browse-next").is_disabled():
        before = status.inner_text()  # each page names its own offsets
        page.click("#browse-next")
        expect(status).not_to_have_text(before)
        seen.append(shown_offsets(page))
        assert len(seen) <= 10, "the next button stays enabled"
    pages = len(seen)
    assert [po for s in seen for po in s] == [(p, o) for _, p, o in sorted(stored)]  # each once, by store time
    for _ in range(pages - 1):
        before = status.inner_text()
        page.click("#browse-prev")
        expect(status).not_to_have_text(before)
    expect(page.locator("#browse-prev")).to_be_disabled()
    assert shown_offsets(page) == seen[0]
    page.select_option("#browse-from", "time")
    t = sorted(stored)[10][0]
    page.fill("#browse-at", str(t))
    page.fill("#browse-n", "100")
    page.click("#browse")
    expect(page.locator("#browse-status")).to_contain_text(f"{sum(1 for k in stored if k[0] >= t)} message(s)")
    paging = [r for r in requests if "/v1/console/page" in r]
    assert len(paging) == 1 + (pages - 1) + (pages - 1) + 1, requests  # one a click
    assert all(r.startswith("POST ") for r in paging)
    assert not [r for r in requests if "/partitions/" in r and "/messages" in r], requests  # no read per partition
    page.screenshot(path=str(artifacts_dir / "console-browser-pages.png"), full_page=True)
    page.context.close()


def test_produce_form_round_trip(server: KafkaServerProcess, browser: Browser, artifacts_dir: Path) -> None:
    api(server, "POST", "/v1/topics", json={"name": "console-produce", "partitions": 3})
    page = open_page(browser, server.url, "page=topic&topic=console-produce", PRODUCER_TOKEN, "topic")
    expect(page.locator("#browse-empty")).to_be_visible()
    expect(page.locator("#produce")).to_be_enabled()
    page.fill("#produce-key", "order-7")
    page.fill("#produce-value", '{"order": 7, "status": "paid"}')
    page.fill("#produce-headers", "source: console\ntrace: abc-1")
    page.fill("#produce-partition", "2")
    page.click("#produce")
    expect(page.locator("#topic-ok")).to_contain_text("produced to partition 2 at offset 0")
    row = page.locator("#browse-table tbody tr", has_text="order-7")
    expect(row).to_have_count(1)
    assert cells(page, "browse-table")[0][:5] == ["2", "0", cells(page, "browse-table")[0][2], "order-7",
                                                  "source: console, trace: abc-1"]
    row.click()
    expect(page.locator("#detail-value")).to_have_text('{"order": 7, "status": "paid"}')
    page.screenshot(path=str(artifacts_dir / "console-produce.png"), full_page=True)
    fetched = api(server, "GET", "/v1/topics/console-produce/partitions/2/messages?offset=0")["messages"]
    assert [(m["key"], m["value"], m["headers"]) for m in fetched] == [
        ("order-7", '{"order": 7, "status": "paid"}', {"source": "console", "trace": "abc-1"})]
    # a header line without a name is refused in the page, nothing is sent
    page.fill("#produce-headers", "no colon here")
    page.click("#produce")
    expect(page.locator("#topic-error")).to_contain_text("headers line 1")
    assert len(api(server, "GET", "/v1/topics/console-produce/partitions/2/messages?offset=0")["messages"]) == 1
    page.context.close()


def test_produce_form_sends_binary_keys_and_values_as_base64(server: KafkaServerProcess, browser: Browser,
                                                             artifacts_dir: Path) -> None:
    """A key or value that is not UTF-8 is produced from the form as the base64 of its bytes (a key shown as
    base64:... pasted with its prefix too); bad base64 is refused naming the field, and nothing is stored."""
    api(server, "POST", "/v1/topics", json={"name": "console-binary", "partitions": 1})
    page = open_page(browser, server.url, "page=topic&topic=console-binary", PRODUCER_TOKEN, "topic")
    expect(page.locator("#browse-empty")).to_be_visible()
    key, value = b"\x00\x01\xff\xfe", b"\x89PNG\r\n\x1a\n\x00\xff"
    page.fill("#produce-key", "base64:" + base64.b64encode(key).decode())
    page.select_option("#produce-key-encoding", "base64")
    page.fill("#produce-value", base64.encodebytes(value * 8).decode())  # wrapped at 76 characters, as base64 writes
    page.select_option("#produce-encoding", "base64")
    page.click("#produce")
    expect(page.locator("#topic-ok")).to_contain_text("produced to partition 0 at offset 0")
    expect(page.locator("#browse-table tbody tr", has_text="base64:AAH//g==")).to_have_count(1)
    page.screenshot(path=str(artifacts_dir / "console-produce-binary.png"), full_page=True)
    (m,) = api(server, "GET", "/v1/topics/console-binary/partitions/0/messages?offset=0")["messages"]
    assert (base64.b64decode(m["key"]), m["key_encoding"]) == (key, "base64")
    assert (base64.b64decode(m["value"]), m["encoding"]) == (value * 8, "base64")
    # text typed while base64 is chosen: refused by the server, naming the field; nothing stored
    page.fill("#produce-key", "order 7")
    page.click("#produce")
    expect(page.locator("#topic-error")).to_contain_text("key")
    expect(page.locator("#topic-error")).to_contain_text("is not valid base64")
    page.select_option("#produce-key-encoding", "utf-8")
    page.fill("#produce-value", "not base64!")
    page.click("#produce")
    expect(page.locator("#topic-error")).to_contain_text("value")
    expect(page.locator("#topic-error")).to_contain_text("is not valid base64")
    assert len(api(server, "GET", "/v1/topics/console-binary/partitions/0/messages?offset=0")["messages"]) == 1
    page.context.close()


def test_headers_that_are_not_text_show_as_base64_and_null(server: KafkaServerProcess, browser: Browser,
                                                           artifacts_dir: Path) -> None:
    """A header value that is not UTF-8 shows as base64:... (as a key does), a null one as (null), a name given
    twice twice, in the browser's row and the message detail, from the browser and from the search page; the
    produce form sends a name given twice twice."""
    api(server, "POST", "/v1/topics", json={"name": "console-headers", "partitions": 1})
    produce(server, "console-headers", [{"key": "traced-1", "value": "v", "header_list": [
        {"name": "trace", "value": "AAH//g==", "encoding": "base64"}, {"name": "KEYS", "value": "c-1"},
        {"name": "KEYS", "value": "c-2"}, {"name": "gone", "value": None}]}])
    shown = ["trace: base64:AAH//g==", "KEYS: c-1", "KEYS: c-2", "gone: (null)"]
    page = open_page(browser, server.url, "page=topic&topic=console-headers", ADMIN_TOKEN, "topic")
    row = page.locator("#browse-table tbody tr", has_text="traced-1")
    expect(row).to_have_count(1)
    assert cells(page, "browse-table")[0][4] == ", ".join(shown)
    row.click()
    expect(page.locator("#detail-headers")).to_have_text("\n".join(shown))
    page.screenshot(path=str(artifacts_dir / "console-binary-headers.png"), full_page=True)

    page.fill("#produce-value", "twice")
    page.fill("#produce-headers", "KEYS: c-3\nKEYS: c-4")
    page.click("#produce")
    expect(page.locator("#topic-ok")).to_contain_text("at offset 1")
    fetched = api(server, "GET", "/v1/topics/console-headers/partitions/0/messages?offset=1")["messages"]
    assert fetched[0]["header_list"] == [{"name": "KEYS", "value": "c-3", "encoding": "utf-8"},
                                         {"name": "KEYS", "value": "c-4", "encoding": "utf-8"}]
    page.context.close()

    page = open_page(browser, server.url, "page=search", READER_TOKEN, "search")
    page.fill("#topic", "console-headers")
    page.fill("#key", "c-2")
    page.click("#search")
    page.locator("#results tbody tr", has_text="traced-1").click()
    expect(page.locator("#detail-headers")).to_have_text("\n".join(shown))
    page.context.close()


def test_a_binary_key_is_searched_by_its_base64(server: KafkaServerProcess, browser: Browser) -> None:
    """A key that is not UTF-8 shows as base64:...; the search page finds its records by that base64 (pasted with
    or without the prefix) with "as base64", and never another key's whose bytes differ only where not UTF-8."""
    from confluent_kafka import Producer

    api(server, "POST", "/v1/topics", json={"name": "console-binkeys", "partitions": 1})
    p = Producer({"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "token", "sasl.password": PRODUCER_TOKEN})
    try:
        p.produce("console-binkeys", b"first", key=b"\xff\x01")
        p.produce("console-binkeys", b"second", key=b"\xfe\x01")
        assert p.flush(30) == 0
    finally:
        p.close()
    page = open_page(browser, server.url, "page=search", READER_TOKEN, "search")
    for asked, value, shown in (("/wE=", "first", "base64:/wE="), ("base64:/gE=", "second", "base64:/gE=")):
        page.fill("#topic", "console-binkeys")
        page.fill("#key", asked)
        page.select_option("#key-encoding", "base64")
        page.click("#search")
        expect(page.locator("#results tbody tr", has_text=value)).to_have_count(1)
        expect(page.locator("#results tbody tr")).to_have_count(1)
        expect(page.locator("#results tbody tr")).to_contain_text(shown)
    page.fill("#key", "not base64!")
    page.click("#search")
    expect(page.locator("#error")).to_contain_text("base64")
    page.context.close()


def test_read_only_token_sees_every_view_with_actions_disabled(
        server: KafkaServerProcess, browser: Browser, artifacts_dir: Path) -> None:
    api(server, "POST", "/v1/topics", json={"name": "console-read", "partitions": 1})
    produce(server, "console-read", [{"key": "a", "value": "seen"}])
    api(server, "POST", "/v1/groups/console-reader/offsets",
        json={"to": "earliest", "topics": ["console-read"]})  # a group with a committed offset, no members
    page = open_page(browser, server.url, "page=topic&topic=console-read", READER_TOKEN, "topic")
    expect(page.locator("#browse-table tbody tr")).to_have_count(1)
    expect(page.locator("#produce")).to_be_disabled()
    expect(page.locator("#produce")).to_have_attribute("title", "needs a token with the produce scope")
    page.fill("#produce-value", "not allowed")
    page.locator("#produce-form").evaluate("f => f.requestSubmit()")  # forced past the disabled button
    expect(page.locator("#topic-error")).to_contain_text("403")
    assert len(api(server, "GET", "/v1/topics/console-read/partitions/0/messages")["messages"]) == 1
    page.screenshot(path=str(artifacts_dir / "console-read-only-topic.png"), full_page=True)

    page.click("#nav-groups")
    expect(page.locator("body")).to_have_attribute("data-loaded", "groups")
    page.locator("#groups-table tbody tr", has_text="console-reader").locator("a").click()
    expect(page.locator("#group-offsets tbody tr td").nth(4)).to_have_text("1")  # the lag is shown
    expect(page.locator("#reset-preview")).to_be_disabled()
    expect(page.locator("#reset-apply")).to_be_disabled()
    page.locator("#reset-form").evaluate("f => f.requestSubmit()")
    expect(page.locator("#groups-error")).to_contain_text("403")
    page.screenshot(path=str(artifacts_dir / "console-read-only-groups.png"), full_page=True)
    page.context.close()


def test_newest_of_all_partitions_is_one_request_merged_by_store_time(server: KafkaServerProcess) -> None:
    """/v1/console/newest answers the message browser's first page of a topic: the newest n over every partition,
    oldest first by store time, with every partition's offsets and the page's first offset of each."""
    api(server, "POST", "/v1/topics", json={"name": "newest-all", "partitions": 3})
    for i in range(9):  # one request each, a millisecond apart: store times rise with i
        produce(server, "newest-all", [{"value": f"v{i}", "partition": i % 3}])
        ms = time.time_ns() // 1_000_000
        while time.time_ns() // 1_000_000 == ms:
            pass
    body = api(server, "GET", "/v1/console/newest?topic=newest-all&n=4")
    assert [m["value"] for m in body["messages"]] == ["v5", "v6", "v7", "v8"]
    assert body["bounds"] == {str(p): {"start": 0, "end": 3} for p in range(3)}
    assert body["start"] == {"0": 2, "1": 2, "2": 1} and body["next"] == {str(p): 3 for p in range(3)}
    everything = api(server, "GET", "/v1/console/newest?topic=newest-all&n=100")["messages"]
    assert [m["value"] for m in everything] == [f"v{i}" for i in range(9)]
    too_many = httpx.get(server.url + "/v1/console/newest?topic=newest-all&n=1001", headers=ADMIN, timeout=30)
    assert too_many.status_code == 400 and "n" in too_many.text
    missing = httpx.get(server.url + "/v1/console/newest?topic=no-such-topic", headers=ADMIN, timeout=30)
    assert missing.status_code == 404, missing.text
