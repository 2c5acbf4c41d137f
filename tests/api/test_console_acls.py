"""The console under access control rules, in headless Chromium over a real `mqindex serve`: the Access page
lists, adds and removes rules for an admin allowed to change them, shows them read-only to one allowed only to
list them, and to a caller allowed neither only its own access; the Topics page lists only the topics the caller
may describe, and its Create, Delete, Reassign and compaction buttons and the topic page's Produce follow the
caller's rights as GET /v1/admin/acls/my-rights answers them (the server decides, the page does not guess). The
throughput history and the nodes' partitions name only topics the caller may describe. Screenshots go to the
test artifacts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from api.security.tokens import fingerprint
from tests.api import test_web_page as web
from tests.api.server import ServerProcess
from tests.api.test_console import open_page
from tests.kafka.conftest import KafkaServerProcess

browser = web.browser  # the module-scoped headless Chromium fixture
ROOT, OPS, READER = "root-token-0123456789", "ops-token-0123456789", "reader-token-0123456789"
OPS_USER, READER_USER = f"User:token-{fingerprint(OPS)}", f"User:token-{fingerprint(READER)}"
TOPICS = ("team-a.orders", "team-a.audit", "team-b.orders")


def rule(principal: str, rtype: str, name: str, op: str, pattern: str = "literal") -> dict[str, str]:
    return {"principal": principal, "resource_type": rtype, "resource_name": name, "operation": op,
            "pattern_type": pattern}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("console-acls")
    config = d / "mqindex.toml"
    config.write_text(f'superusers = ["token-{fingerprint(ROOT)}"]\n')
    tokens = f"{ROOT}=admin;{OPS}=read,produce,admin;{READER}=read,produce"
    s = KafkaServerProcess(d / "node", "--config", str(config),  # a Kafka listener: consumer groups
                           env={"MQINDEX_TOKENS": tokens}).start()
    try:
        root = {"Authorization": f"Bearer {ROOT}"}
        for t in TOPICS:
            assert httpx.post(f"{s.url}/v1/topics", json={"name": t, "partitions": 1}, headers=root).status_code == 201
            r = httpx.post(f"{s.url}/v1/topics/{t}/messages", json={"messages": [{"key": "k", "value": t}]},
                           headers=root, timeout=30)
            assert r.status_code == 200, r.text
        r = httpx.post(f"{s.url}/v1/admin/acls", headers=root, json={"rules": [
            rule(READER_USER, "topic", "team-a.", "read", "prefixed"),
            rule(READER_USER, "topic", "team-a.orders", "write"),
            rule(OPS_USER, "cluster", "kafka-cluster", "describe"),
            rule(OPS_USER, "topic", "team-", "describe", "prefixed")]})
        assert r.status_code == 201, r.text
        yield s
    finally:
        s.stop()


def rights(server: ServerProcess, token: str, **names: Any) -> dict[str, Any]:
    r = httpx.get(f"{server.url}/v1/admin/acls/my-rights", params=names, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_my_rights_answer_the_scopes_and_rules(server: ServerProcess) -> None:
    reader = rights(server, READER, topic=list(TOPICS))
    assert reader["principal"] == READER_USER and reader["rules_active"] and not reader["superuser"]
    assert reader["cluster"] == {"describe": False, "alter": False, "create_topics": False}
    assert {t: r["produce"] for t, r in reader["topics"].items()} == {
        "team-a.orders": True, "team-a.audit": False, "team-b.orders": False}
    assert {t: r["read"] for t, r in reader["topics"].items()} == {
        "team-a.orders": True, "team-a.audit": True, "team-b.orders": False}
    assert not any(r["delete"] for r in reader["topics"].values())  # no admin scope
    ops = rights(server, OPS, topic=["team-b.orders"])
    assert ops["cluster"] == {"describe": True, "alter": False, "create_topics": False}
    assert ops["topics"]["team-b.orders"] == {"describe": True, "read": False, "produce": False, "delete": False,
                                              "alter_configs": False}
    root = rights(server, ROOT, topic=["anything"])
    assert root["superuser"] and all(root["cluster"].values()) and all(root["topics"]["anything"].values())
    assert httpx.get(f"{server.url}/v1/admin/acls/my-rights").status_code == 401
    # the throughput history names only what the caller may describe
    seen = httpx.get(f"{server.url}/v1/console/throughput", headers={"Authorization": f"Bearer {READER}"}).json()
    assert set(seen["topics"]) == {"team-a.orders", "team-a.audit"}
    nodes = httpx.get(f"{server.url}/v1/cluster/nodes", headers={"Authorization": f"Bearer {READER}"}).json()
    assert {p for n in nodes["nodes"] for p in n["partitions"]} == {"team-a.orders-0", "team-a.audit-0"}


def test_console_follows_the_rules(server: ServerProcess, browser: Browser, artifacts_dir: Path) -> None:
    url = server.url
    # an admin allowed everything: the rules listed, one added and one removed through the page
    page = open_page(browser, url, "acls", ROOT)
    expect(page.locator("#acls-me")).to_contain_text("superuser")
    rows = page.locator("#acls-table tbody tr")
    expect(rows).to_have_count(4)
    page.fill("#acl-principal", OPS_USER)
    page.select_option("#acl-resource-type", "topic")
    page.fill("#acl-resource-name", "team-b.orders")
    page.select_option("#acl-operation", "delete")
    page.click("#acl-add")
    expect(page.locator("#acls-ok")).to_contain_text("rule added: allow " + OPS_USER + " delete on topic team-b.orders")
    expect(rows).to_have_count(5)
    assert rights(server, OPS, topic=["team-b.orders"])["topics"]["team-b.orders"]["delete"]
    page.once("dialog", lambda d: d.accept())
    page.click(f"button.remove-acl[aria-label='remove rule allow {READER_USER} write on topic team-a.orders']")
    expect(page.locator("#acls-ok")).to_contain_text("1 rule(s) removed")
    expect(rows).to_have_count(4)
    assert not rights(server, READER, topic=["team-a.orders"])["topics"]["team-a.orders"]["produce"]
    page.screenshot(path=str(artifacts_dir / "console-acls-admin.png"), full_page=True)
    page.close()
    r = httpx.post(f"{url}/v1/admin/acls", headers={"Authorization": f"Bearer {ROOT}"},
                   json={"rules": [rule(READER_USER, "topic", "team-a.orders", "write")]})
    assert r.status_code == 201, r.text

    # admin scope, DESCRIBE on the cluster only: the rules read-only; Topics: Delete where it may, no Create
    page = open_page(browser, url, "acls", OPS)
    expect(page.locator("#acls-table tbody tr")).to_have_count(5)
    expect(page.locator("#acls-add-panel")).to_be_hidden()
    for button in page.locator("button.remove-acl").all():
        expect(button).to_be_disabled()
    page.screenshot(path=str(artifacts_dir / "console-acls-read-only.png"), full_page=True)
    page.click("#nav-topics")
    expect(page.locator("body")).to_have_attribute("data-loaded", "topics")
    expect(page.locator("#topics-table tbody tr")).to_have_count(3)
    expect(page.locator("button.delete-topic[data-topic='team-b.orders']")).to_be_enabled()
    expect(page.locator("button.delete-topic[data-topic='team-a.orders']")).to_be_disabled()
    expect(page.locator("#create-topic")).to_be_disabled()
    expect(page.locator("#reassign")).to_be_disabled()
    page.click("#nav-objects")
    expect(page.locator("body")).to_have_attribute("data-loaded", "objects")
    expect(page.locator("#run-compaction")).to_be_disabled()
    page.close()

    # no admin scope: only its own access; Topics lists what it may describe; Produce where it may write
    page = open_page(browser, url, "acls", READER)
    expect(page.locator("#acls-me")).to_contain_text(READER_USER)
    expect(page.locator("#acls-hidden")).to_be_visible()
    expect(page.locator("#acls-list")).to_be_hidden()
    expect(page.locator("#acls-add-panel")).to_be_hidden()
    page.screenshot(path=str(artifacts_dir / "console-acls-reader.png"), full_page=True)
    page.click("#nav-topics")
    expect(page.locator("body")).to_have_attribute("data-loaded", "topics")
    expect(page.locator("#topics-table tbody tr td:first-child")).to_have_text(["team-a.audit", "team-a.orders"])
    expect(page.locator("#partitions-table tbody tr")).to_have_count(2)
    page.click("a.topic-link:text-is('team-a.orders')")
    expect(page.locator("body")).to_have_attribute("data-loaded", "topic")
    expect(page.locator("#produce")).to_be_enabled()
    page.goto(f"{url}/?page=topic&topic=team-a.audit#token={READER}")
    expect(page.locator("body")).to_have_attribute("data-loaded", "topic")
    expect(page.locator("#produce")).to_be_disabled()
    expect(page.locator("#produce")).to_have_attribute("title", "not allowed: needs WRITE on the topic")
    page.screenshot(path=str(artifacts_dir / "console-acls-reader-topic.png"), full_page=True)
    page.close()


def test_group_offset_reset_follows_the_group_rules(server: ServerProcess, browser: Browser,
                                                     artifacts_dir: Path) -> None:
    root = {"Authorization": f"Bearer {ROOT}"}
    for group, topic in (("team-a-app", "team-a.orders"), ("team-b-app", "team-b.orders")):
        r = httpx.post(f"{server.url}/v1/groups/{group}/offsets", headers=root, json={"to": "earliest",
                                                                                       "topics": [topic]})
        assert r.status_code == 200, r.text
    r = httpx.post(f"{server.url}/v1/admin/acls", headers=root, json={"rules": [
        rule(OPS_USER, "group", "team-", "describe", "prefixed"), rule(OPS_USER, "group", "team-a-app", "read")]})
    assert r.status_code == 201, r.text
    assert rights(server, OPS, group=["team-a-app", "team-b-app"])["groups"] == {
        "team-a-app": {"describe": True, "reset_offsets": True, "delete": False},
        "team-b-app": {"describe": True, "reset_offsets": False, "delete": False}}
    page = open_page(browser, server.url, "groups", OPS)
    page.locator("#groups-table tbody tr", has_text="team-a-app").locator("a").click()
    expect(page.locator("#group-name")).to_have_text("team-a-app")
    expect(page.locator("#reset-preview")).to_be_enabled()
    page.locator("#groups-table tbody tr", has_text="team-b-app").locator("a").click()
    expect(page.locator("#group-name")).to_have_text("team-b-app")
    expect(page.locator("#reset-preview")).to_be_disabled()
    expect(page.locator("#reset-preview")).to_have_attribute("title", "not allowed: needs READ on the group")
    page.screenshot(path=str(artifacts_dir / "console-acls-group-reset.png"), full_page=True)
    page.close()
