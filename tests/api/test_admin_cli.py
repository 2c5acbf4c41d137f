"""The admin verbs against a real server process: `mqindex topics create|list|describe`, `nodes`, `reassign`,
`compact`; a table by default and JSON with --json on every verb; an error is one line and a non-zero exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.api.server import ServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MQINDEX, *args, "--url", url], capture_output=True, text=True, timeout=60)


def ok(url: str, *args: str) -> str:
    r = cli(url, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_admin_verbs_tables_and_json(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        url = server.url
        assert ok(url, "topics", "list").strip() == "no topics"
        assert sorted(json.loads(ok(url, "topics", "list", "--json")), key=lambda t: t["name"]) == []
        created = json.loads(ok(url, "topics", "create", "orders", "--partitions", "2", "--json"))
        assert (created["name"], created["partitions"]) == ("orders", 2)
        ok(url, "topics", "create", "audit")
        table = ok(url, "topics", "list").splitlines()
        assert table[0].split() == ["NAME", "PARTITIONS", "TOPIC_ID"]
        assert [line.split()[:2] for line in table[1:]] == [["audit", "1"], ["orders", "2"]]

        r = httpx.post(f"{url}/v1/topics/orders/messages",
                       json={"messages": [{"key": "k", "value": "v", "partition": i % 2} for i in range(5)]})
        assert r.status_code == 200
        described = json.loads(ok(url, "topics", "describe", "orders", "--json"))
        parts = described["partition_details"]
        assert [(p["partition"], p["leader"], p["start_offset"], p["end_offset"]) for p in parts] == [
            (0, 0, 0, 3), (1, 0, 0, 2)]
        text = ok(url, "topics", "describe", "orders")
        assert text.startswith("orders  partitions=2")
        header = next(line for line in text.splitlines() if line.startswith("PARTITION"))
        assert header.split() == ["PARTITION", "LEADER", "LEADER_EPOCH", "STREAM_EPOCH", "START_OFFSET",
                                  "END_OFFSET", "BYTES", "OBJECTS"]

        nodes = json.loads(ok(url, "nodes", "--json"))
        assert [(n["node_id"], n["state"]) for n in nodes] == [(0, "alive")]
        assert sorted(nodes[0]["partitions"]) == ["audit-0", "orders-0", "orders-1"]
        assert ok(url, "nodes").splitlines()[0].split() == ["NODE_ID", "EPOCH", "STATE", "HTTP", "KAFKA",
                                                            "LEASE_EXPIRES", "PARTITIONS"]

        moved = json.loads(ok(url, "reassign", "orders", "1", "--to", "0", "--json"))
        assert (moved["topic"], moved["partition"], moved["to"], moved["unchanged"]) == ("orders", 1, 0, True)
        assert "orders-1: node 0 leads it already; nothing moved" in ok(url, "reassign", "orders", "1", "--to", "0")

        totals = json.loads(ok(url, "compact", "--json"))
        assert totals["runs"] == 0
        ran = json.loads(ok(url, "compact", "--now", "--json"))
        assert ran["errors"] == [] and "stream_set_objects" in ran
        assert json.loads(ok(url, "compact", "--json"))["runs"] == 1
        assert any(line.startswith("runs ") for line in ok(url, "compact").splitlines())

        # errors: one line, non-zero, and nothing changed
        r = cli(url, "topics", "describe", "missing")
        assert r.returncode != 0 and "missing" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        r = cli(url, "reassign", "orders", "0", "--to", "7")
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
        assert sorted(json.loads(ok(url, "topics", "list", "--json")), key=lambda t: t["name"]) == [
            {"name": "audit", "partitions": 1, "topic_id": 2}, {"name": "orders", "partitions": 2, "topic_id": 1}]
    finally:
        server.stop()


def test_topics_without_a_count_take_default_partitions(tmp_path: Path) -> None:
    """`mqindex topics create` and POST /v1/topics without a count take the node setting default_partitions (as
    Kafka's CreateTopics and auto-created topics do); a count given wins; a count out of range is refused."""
    server = ServerProcess(tmp_path / "data", "--default-partitions", "3").start()
    try:
        url = server.url
        assert json.loads(ok(url, "topics", "create", "by-cli", "--json"))["partitions"] == 3
        assert httpx.post(f"{url}/v1/topics", json={"name": "by-http"}, timeout=30).json()["partitions"] == 3
        assert httpx.post(f"{url}/v1/topics", json={"name": "given", "partitions": 2}, timeout=30).json()[
            "partitions"] == 2
        bad = httpx.post(f"{url}/v1/topics", json={"name": "zero", "partitions": 0}, timeout=30)
        assert bad.status_code == 400 and bad.json()["field"].endswith("partitions"), bad.text
        listed = {t["name"]: t["partitions"] for t in httpx.get(f"{url}/v1/topics", timeout=30).json()}
        assert listed == {"by-cli": 3, "by-http": 3, "given": 2}
    finally:
        server.stop()


def test_topics_alter_adds_partitions(tmp_path: Path) -> None:
    """`mqindex topics alter NAME --partitions N` grows the topic (with configs in the same call, or alone); a
    count that does not grow is one line naming the current count, exit 1, and nothing changes."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        url = server.url
        ok(url, "topics", "create", "orders", "--partitions", "2")
        grown = json.loads(ok(url, "topics", "alter", "orders", "--partitions", "4", "--retention-ms", "60000",
                              "--json"))
        assert grown["partitions"] == 4 and grown["configs"]["retention.ms"] == {"value": 60000, "source": "topic"}
        assert "partitions=4" in ok(url, "topics", "describe", "orders")
        r = cli(url, "topics", "alter", "orders", "--partitions", "3")
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "has 4 partitions" in r.stderr and "only grow" in r.stderr, r.stderr
        assert json.loads(ok(url, "topics", "describe", "orders", "--json"))["partitions"] == 4
    finally:
        server.stop()
