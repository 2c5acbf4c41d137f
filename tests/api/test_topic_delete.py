"""Topic deletion on one real `mqindex serve` process: `DELETE /v1/topics/{topic}` and `mqindex topics delete`.

After a deletion the topic is gone for every read (by offset, by key, by message id), a topic created again
under the name starts empty at offset 0 and never shows the old records, and both stay so across restarts,
including a kill -9 between the deletion and the next upload (the WAL still holds the deleted records)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.api.server import ServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")
TOKENS = {"MQINDEX_TOKENS": "admin-tok=read,produce,admin;reader-tok=read,produce"}
ADMIN = {"Authorization": "Bearer admin-tok"}
READER = {"Authorization": "Bearer reader-tok"}


def cli(url: str, *args: str, token: str = "admin-tok") -> subprocess.CompletedProcess[str]:
    return subprocess.run([MQINDEX, *args, "--url", url, "--token", token], capture_output=True, text=True,
                          timeout=60)


def produce(url: str, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    r = httpx.post(f"{url}/v1/topics/{topic}/messages", json={"messages": messages}, headers=ADMIN, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["results"]  # type: ignore[no-any-return]


def by_key(url: str, topic: str, key: str) -> httpx.Response:
    return httpx.get(f"{url}/v1/messages", params={"topic": topic, "key": key, "max": 100}, headers=ADMIN,
                     timeout=30)


def fetch(url: str, topic: str, partition: int, offset: int = 0) -> httpx.Response:
    return httpx.get(f"{url}/v1/topics/{topic}/partitions/{partition}/messages",
                     params={"offset": offset, "max": 100}, headers=ADMIN, timeout=30)


def assert_gone(url: str, topic: str, old_ids: list[str]) -> None:
    """Every read of the deleted topic answers 404 in the project's error shape."""
    for r in (httpx.get(f"{url}/v1/topics/{topic}", headers=ADMIN), by_key(url, topic, "k0"), fetch(url, topic, 0)):
        assert r.status_code == 404, r.text
        assert r.json()["field"] == "topic" and topic in r.json()["error"]
    for mid in old_ids:
        assert httpx.get(f"{url}/v1/messages/{mid}", headers=ADMIN).status_code == 404
    assert topic not in [t["name"] for t in httpx.get(f"{url}/v1/topics", headers=ADMIN).json()]


def assert_only_new(url: str, topic: str, new: list[dict[str, Any]], old_ids: list[str]) -> None:
    """The topic created again holds exactly the records produced to it since: offsets from 0, keys found
    only in them, old message ids unknown."""
    got = fetch(url, topic, 0).json()["messages"]
    assert [(m["offset"], m["value"]) for m in got] == [(i, f"new-{i}") for i in range(len(new))]
    found = by_key(url, topic, "k0").json()["messages"]
    assert [m["value"] for m in found] == [f"new-{i}" for i in reversed(range(len(new))) if i % 2 == 0]
    assert by_key(url, topic, "k1-old-only").json()["messages"] == []
    for mid in old_ids:
        assert httpx.get(f"{url}/v1/messages/{mid}", headers=ADMIN).status_code == 404


def test_delete_then_create_again_and_kill_before_the_upload(tmp_path: Path) -> None:
    # nothing is uploaded on its own: at the kill -9 the deleted records of "pay" are only in the WAL
    server = ServerProcess(tmp_path / "data", "--upload-interval-s", "3600", "--upload-threshold", str(1 << 30),
                           env=TOKENS).start()
    try:
        url = server.url
        assert httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 2,
                                                    "configs": {"retention.ms": 86_400_000}},
                          headers=ADMIN).status_code == 201
        assert httpx.post(f"{url}/v1/topics", json={"name": "pay", "partitions": 1}, headers=ADMIN).status_code == 201
        old = produce(url, "orders", [{"key": "k0" if i % 2 == 0 else "k1-old-only", "value": f"old-{i}",
                                       "partition": 0} for i in range(20)])
        old_ids = [m["msg_id"] for m in old]
        old_pay = [m["msg_id"] for m in produce(url, "pay", [{"key": "k0" if i % 2 == 0 else "k1-old-only",
                                                              "value": f"old-{i}"} for i in range(30)])]
        assert len(by_key(url, "orders", "k0").json()["messages"]) == 10

        # admin scope: a token without it is refused and nothing is deleted
        r = httpx.delete(f"{url}/v1/topics/orders", headers=READER)
        assert r.status_code == 403, r.text
        assert fetch(url, "orders", 0).json()["messages"][0]["value"] == "old-0"

        # the CLI: a table by default
        r = cli(url, "topics", "delete", "orders")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].split() == ["NAME", "PARTITIONS", "TOPIC_ID", "DELETED"]
        assert lines[1].split()[:2] == ["orders", "2"] and lines[1].split()[3] == "True"
        assert_gone(url, "orders", old_ids)

        # unknown topic: 404 in the error shape over HTTP, a one-line error and a non-zero exit from the CLI
        r = httpx.delete(f"{url}/v1/topics/orders", headers=ADMIN)
        assert r.status_code == 404 and r.json()["field"] == "topic", r.text
        r = cli(url, "topics", "delete", "orders")
        assert r.returncode != 0 and "orders" in r.stderr and len(r.stderr.strip().splitlines()) == 1

        # created again under the name: a new id, empty at offset 0, none of the old records or configs
        r = httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 1}, headers=ADMIN)
        assert r.status_code == 201, r.text
        assert r.json()["topic_id"] != int(old_ids[0][:8], 16)  # a message id starts with its topic id
        assert fetch(url, "orders", 0).json() == {"messages": [], "next_offset": 0}
        assert by_key(url, "orders", "k0").json()["messages"] == []
        configs = httpx.get(f"{url}/v1/topics/orders", headers=ADMIN).json()["configs"]
        assert configs["retention.ms"]["source"] == "default"
        new = produce(url, "orders", [{"key": "k0" if i % 2 == 0 else "k1", "value": f"new-{i}", "partition": 0}
                                      for i in range(6)])
        assert [m["offset"] for m in new] == list(range(6))
        assert_only_new(url, "orders", new, old_ids)

        # --json; then kill -9 before anything of "pay" was uploaded
        r = cli(url, "topics", "delete", "pay", "--json")
        assert r.returncode == 0, r.stderr
        body = json.loads(r.stdout)
        assert (body["name"], body["partitions"], body["deleted"]) == ("pay", 1, True)
        assert server.restart(signal.SIGKILL) == -signal.SIGKILL
        url = server.url
        assert_gone(url, "pay", old_pay)
        assert_only_new(url, "orders", new, old_ids)  # its records came back from the WAL, the old ones did not
        assert httpx.post(f"{url}/v1/topics", json={"name": "pay", "partitions": 1}, headers=ADMIN).status_code == 201
        assert fetch(url, "pay", 0).json() == {"messages": [], "next_offset": 0}
        new_pay = produce(url, "pay", [{"key": "k0" if i % 2 == 0 else "k1", "value": f"new-{i}"} for i in range(4)])
        assert_only_new(url, "pay", new_pay, old_pay)
    finally:
        server.stop(signal.SIGKILL)
