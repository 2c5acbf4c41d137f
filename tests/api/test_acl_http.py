"""The access control rules over HTTP and the CLI, on a real `mqindex serve`: `mqindex acls add|list|remove`
(/v1/admin/acls); a token is a principal under the same rules as Kafka's users: with READ on the prefix
`team-a.` its key lookups, id lookups and fetches of team-a.orders answer, those of team-b.orders answer 403
with the same body whether or not the topic holds the key (or exists), and /v1/topics lists only what it may
describe. Every admin change and every denial is an audit line; denials are counted in /metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.security.tokens import fingerprint
from tests.api.server import ServerProcess

ADMIN, READER = "admin-token-0123456789abcdef", "reader-token-0123456789abcdef"
READER_PRINCIPAL = f"User:token-{fingerprint(READER)}"
FORBIDDEN = {"error": "not authorized", "field": "authorization"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("acl-http")
    config = d / "mqindex.toml"
    config.write_text(f'superusers = ["token-{fingerprint(ADMIN)}"]\naudit_log = "{d / "audit.log"}"\n')
    s = ServerProcess(d / "node", "--config", str(config), "--kafka-listener", "",
                      env={"MQINDEX_TOKENS": f"{ADMIN}=admin;{READER}=read"}).start()
    try:
        yield s
    finally:
        s.stop()


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    mqindex = str(Path(sys.executable).parent / "mqindex")
    return subprocess.run([mqindex, "acls", *args, "--url", server.url, "--token", ADMIN], capture_output=True,
                          text=True, timeout=60, env=os.environ)


def produce(server: ServerProcess, topic: str) -> list[dict[str, Any]]:
    r = httpx.post(f"{server.url}/v1/topics", json={"name": topic, "partitions": 1}, headers=as_(ADMIN))
    assert r.status_code == 201, r.text
    r = httpx.post(f"{server.url}/v1/topics/{topic}/messages", headers=as_(ADMIN), timeout=60,
                   json={"messages": [{"key": "k1", "value": f"{topic}-v"}]})
    assert r.status_code == 200, r.text
    return list(r.json()["results"])


def test_token_principal_under_topic_rules(server: ServerProcess) -> None:
    a = produce(server, "team-a.orders")
    b = produce(server, "team-b.orders")
    added = cli(server, "add", "--principal", READER_PRINCIPAL, "--topic", "team-a.", "--prefixed",
                "--operation", "read")
    assert added.returncode == 0, added.stderr
    listed = cli(server, "list", "--json")
    assert json.loads(listed.stdout)["rules"] == [
        {"principal": READER_PRINCIPAL, "host": "*", "resource_type": "topic", "pattern_type": "prefixed",
         "resource_name": "team-a.", "operation": "read", "permission": "allow"}]
    assert "team-a." in cli(server, "list").stdout

    get = lambda path, **q: httpx.get(server.url + path, params=q, headers=as_(READER), timeout=30)  # noqa: E731
    r = get("/v1/messages", topic="team-a.orders", key="k1")
    assert r.status_code == 200 and [m["value"] for m in r.json()["messages"]] == ["team-a.orders-v"], r.text
    refusals = [get("/v1/messages", topic="team-b.orders", key="k1"),  # holds the key
                get("/v1/messages", topic="team-b.orders", key="absent"),  # does not
                get("/v1/messages", topic="team-z.none", key="k1"),  # no such topic
                get(f"/v1/messages/{b[0]['msg_id']}"),
                get(f"/v1/messages/{b[0]['msg_id'][:16]}0000000000ffffff"),  # no such offset in that topic
                get("/v1/topics/team-b.orders/partitions/0/messages"),
                get("/v1/topics/team-b.orders")]
    assert [(r.status_code, r.json()) for r in refusals] == [(403, FORBIDDEN)] * len(refusals)
    assert get(f"/v1/messages/{a[0]['msg_id']}").json()["value"] == "team-a.orders-v"
    assert get("/v1/topics/team-a.orders/partitions/0/messages").status_code == 200
    assert [t["name"] for t in get("/v1/topics").json()] == ["team-a.orders"]
    assert {p["topic"] for p in get("/v1/console/partitions").json()["partitions"]} == {"team-a.orders"}
    names = {t["name"] for t in httpx.get(server.url + "/v1/topics", headers=as_(ADMIN)).json()}
    assert {"team-a.orders", "team-b.orders"} <= names  # the superuser sees everything
    # the rules API itself needs admin
    assert httpx.get(server.url + "/v1/admin/acls", headers=as_(READER)).status_code == 403
    bad = httpx.post(server.url + "/v1/admin/acls", headers=as_(ADMIN), json={"rules": [
        {"principal": "alice", "resource_type": "topic", "resource_name": "t", "operation": "read"}]})
    assert bad.status_code == 400 and "principal" in bad.text

    removed = cli(server, "remove", "--principal", READER_PRINCIPAL, "--json")
    assert [r["resource_name"] for r in json.loads(removed.stdout)["removed"]] == ["team-a."]
    assert cli(server, "list").stdout.strip() == "no rules"
    assert get("/v1/messages", topic="team-b.orders", key="k1").status_code == 200  # no rules: scopes only

    audit = [json.loads(x) for x in (server.data_dir.parent / "audit.log").read_text().splitlines()]
    assert any(a["event"] == "denied" and a["resource_name"] == "team-b.orders" and a["interface"] == "http"
               and a["principal"] == READER_PRINCIPAL for a in audit)
    assert [a["event"] for a in audit if a["event"].startswith("acl_")] == ["acl_create", "acl_delete"]
    assert any(a["event"] == "http_admin" and a["resource_name"] == "/v1/topics" and a["result"] == "ok"
               for a in audit)
    metrics = httpx.get(server.url + "/metrics").text
    assert 'mqindex_authorization_denials_total{interface="http",resource_type="topic"} 7.0' in metrics
