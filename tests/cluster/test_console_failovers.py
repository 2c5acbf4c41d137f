"""The console's Nodes page shows each node's failovers (GET /v1/cluster/failovers), newest first: when, the fenced
epoch, the survivor, the partitions taken with their committed ends, the WAL records replayed and how long it took,
naming only the partitions of topics the caller may describe. Two real `mqindex serve` nodes on PostgreSQL,
SeaweedFS and a shared WAL, node 1 killed -9 twice; headless Chromium. Screenshots go to the test artifacts."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from api.security.tokens import fingerprint
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api import test_web_page as web
from tests.api.server import free_port
from tests.cluster.harness import Cluster, wait_until

browser = web.browser  # the module-scoped headless Chromium fixture

ADMIN, READER, CLUSTER = "admin-token-0123456789abcdef", "reader-token-0123456789abcdef", "cluster-token-0123456789ab"
SEEN, HIDDEN = "team-a.orders", "team-b.orders"  # the reader may describe the first only
ROUNDS = 2


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def two(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    config = tmp_path / "mqindex.toml"
    config.write_text(f'cluster_token = "{CLUSTER}"\nsuperusers = ["token-{fingerprint(ADMIN)}"]\n'
                      f'[tokens]\n"{ADMIN}" = ["admin"]\n"{READER}" = ["read"]\n"{CLUSTER}" = ["admin"]\n')
    prefix = f"failovers-page-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(), "--config", str(config),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"))
    try:
        for i in range(2):
            c.start(i)
        yield c
    finally:
        c.stop_all()


def _nodes(c: Cluster) -> list[dict[str, Any]]:
    return list(httpx.get(f"{c.url(0)}/v1/cluster/nodes", headers=as_(ADMIN), timeout=10).json()["nodes"])


def _leaders(c: Cluster) -> dict[str, int]:
    return {p: n["node_id"] for n in _nodes(c) if n["state"] == "alive" for p in n["partitions"]}


def _reports(c: Cluster, token: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{c.url(0)}/v1/cluster/failovers", headers=as_(token), timeout=10)
    assert r.status_code == 200, r.text
    return [f for f in r.json()["failovers"] if f["node"] == 1]


def _raw(c: Cluster, token: str) -> str:
    return httpx.get(f"{c.url(0)}/v1/cluster/failovers", headers=as_(token), timeout=10).text


def _fail_over_node_1(c: Cluster, k: int) -> None:
    """Node 1 leads partition 0 of both topics and holds a produce of each; then it is killed -9 and node 0 takes
    over (its k-th failover reported)."""
    for topic in (SEEN, HIDDEN):
        if _leaders(c).get(f"{topic}-0") != 1:
            r = httpx.post(f"{c.url(0)}/v1/admin/reassignments", json={"topic": topic, "partition": 0, "to": 1},
                           headers=as_(ADMIN), timeout=120)
            assert r.status_code == 200, r.text
        r = httpx.post(f"{c.url(1)}/v1/topics/{topic}/messages", headers=as_(ADMIN), timeout=60,
                       json={"messages": [{"key": "k", "value": f"{topic}-{k}", "partition": 0}]})
        assert r.status_code == 200, r.text
    assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL
    wait_until(lambda: len(_reports(c, ADMIN)) >= k, 60, f"failover {k} of node 1 reported")


def _open_nodes(browser: Browser, c: Cluster, token: str) -> Page:
    page = browser.new_page(viewport={"width": 1500, "height": 900})
    page.goto(f"{c.url(0)}/?page=nodes#token={token}")
    # drawn once every call of the page answered (slow on a loaded machine); all below is then on the page
    expect(page.locator("body")).to_have_attribute("data-loaded", "nodes", timeout=30_000)
    expect(page.locator("#nav-nodes")).to_have_attribute("aria-current", "page")
    expect(page.locator("#nodes-error")).to_have_text("")
    expect(page.locator("#failovers-error")).to_have_text("")
    return page


def _check_rows(page: Page, reports: list[dict[str, Any]], hidden: str) -> None:
    rows = page.locator('#failovers-table tbody tr[data-node="1"]')
    expect(rows).to_have_count(len(reports))
    for i, f in enumerate(reports):  # newest first, as the endpoint lists them
        cells = rows.nth(i).locator("td")
        expect(cells.nth(0)).to_have_text(f"1 ({len(reports)})" if i == 0 else "")
        expect(cells.nth(2)).to_have_text(str(f["fenced_epoch"]))
        expect(cells.nth(3)).to_have_text("0")  # taken by node 0
        expect(cells.nth(4)).to_have_text("shared")
        taken = ", ".join(f"{p} ({f['committed_ends'][p]})" for p in f["partitions"])
        expect(cells.nth(5)).to_have_text(taken)
        expect(cells.nth(5)).not_to_contain_text(hidden)
        expect(cells.nth(6)).to_have_text(str(f["replayed_records"]))
        expect(cells.nth(7)).to_have_text(f"{f['seconds']:.3f} s")


def test_nodes_page_shows_each_failover_newest_first_with_what_the_caller_may_see(
        two: Cluster, browser: Browser, artifacts_dir: Path) -> None:
    c = two
    for topic in (SEEN, HIDDEN):
        r = httpx.post(f"{c.url(0)}/v1/topics", json={"name": topic, "partitions": 2}, headers=as_(ADMIN),
                       timeout=60)
        assert r.status_code == 201, r.text
    r = httpx.post(f"{c.url(0)}/v1/admin/acls", headers=as_(ADMIN), timeout=30, json={"rules": [
        {"principal": f"User:token-{fingerprint(READER)}", "resource_type": "topic", "resource_name": "team-a.",
         "pattern_type": "prefixed", "operation": "read"}]})
    assert r.status_code == 201, r.text
    for k in range(1, ROUNDS + 1):
        _fail_over_node_1(c, k)
        if k < ROUNDS:
            c.nodes[1].port = free_port()  # the same data directory comes back, a new incarnation
            c.nodes[1].start()
            wait_until(lambda: any(n["node_id"] == 1 and n["state"] == "alive" for n in _nodes(c)), 60,
                       "node 1 alive again")
    admin_view = _reports(c, ADMIN)
    assert len(admin_view) == ROUNDS and [f["fenced_epoch"] for f in admin_view] == sorted(
        (f["fenced_epoch"] for f in admin_view), reverse=True)
    assert all({f"{SEEN}-0", f"{HIDDEN}-0"} <= set(f["partitions"]) for f in admin_view), admin_view

    page = _open_nodes(browser, c, ADMIN)  # the admin sees both topics' partitions
    try:
        _check_rows(page, admin_view, hidden="no such topic")
        expect(page.locator('#failovers-table tbody tr[data-node="1"]').first.locator("td").nth(5)).to_contain_text(
            f"{HIDDEN}-0")
        expect(page.locator("#failovers-summary")).to_have_text(f"{ROUNDS} failover(s) of 1 node(s) kept")
        page.screenshot(path=str(artifacts_dir / "console-failovers-admin.png"), full_page=True)
    finally:
        page.close()

    reader_view = _reports(c, READER)  # the endpoint names only the topics the reader may describe
    assert [f["fenced_epoch"] for f in reader_view] == [f["fenced_epoch"] for f in admin_view]
    assert all(HIDDEN not in ",".join(f["partitions"]) for f in reader_view), reader_view
    # nor anywhere else in the answer (the committed ends and the index rescue's ranges name partitions too)
    assert HIDDEN in _raw(c, ADMIN) and HIDDEN not in _raw(c, READER), _raw(c, READER)
    page = _open_nodes(browser, c, READER)
    try:
        _check_rows(page, reader_view, hidden=HIDDEN)
        page.screenshot(path=str(artifacts_dir / "console-failovers-reader.png"), full_page=True)
    finally:
        page.close()
