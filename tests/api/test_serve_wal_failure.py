"""A node whose shared WAL failed for good says so (new-user walkthrough: with `--wal s3://...`, an outage of the WAL's
store longer than its retry bound failed every node; after the store came back they stayed failed, HTTP produce and
`topics create` answered 500 `internal error: WalError` (the topic was created all the same), and /healthz/live
answered 200, so the documented rule, restart only when /healthz does not answer, never applied).

Now an HTTP request meeting the failed WAL answers 503 naming it (a topic creation refused so is found created by
its retry: 409), /healthz/live answers 503 naming the failure, and a restart once the store answers serves again
with every acknowledged record. A real `mqindex serve` with its WAL on a SeaweedFS of the test's own (stopped and
started again by the test) and a retry bound of 3 s (`retry_seconds=3`, so that it fails in seconds)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, free_port, wait_for

TOPIC = "orders"


def _produce(c: httpx.Client, key: str) -> httpx.Response:
    return c.post(f"/v1/topics/{TOPIC}/messages", json={"messages": [{"key": key, "value": f"v-{key}"}]})


def _keys(c: httpx.Client, topic: str = TOPIC) -> list[str] | None:
    r = c.get(f"/v1/topics/{topic}/partitions/0/messages", params={"offset": 0, "max": 1000})
    return [m["key"] for m in r.json()["messages"]] if r.status_code == 200 else None


@pytest.mark.slow(seconds=60)  # SeaweedFS started twice, a node started twice
def test_a_failed_wal_answers_503_fails_liveness_and_a_restart_serves_everything(
        tmp_path: Path, wal_store: SeaweedFS, pg_url: Callable[[], str]) -> None:
    wal = wal_store.store_url("wal", f"w-{uuid.uuid4().hex[:8]}", retry_seconds="3")
    server = ServerProcess(tmp_path / "data", "--wal", wal, "--metadata", pg_url(), "--kafka-listener", "")
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            assert c.post("/v1/topics", json={"name": TOPIC, "partitions": 1}).status_code == 201
            acknowledged = []
            for i in range(3):
                assert _produce(c, f"before-{i}").status_code == 200
                acknowledged.append(f"before-{i}")

            wal_store.stop()
            first = _produce(c, "during")  # its WAL write is retried for 3 s, then the WAL fails for good
            assert first.status_code == 503, first.text
            assert "WAL" in first.json()["error"], first.text
            # its write is the one that failed: the store may have taken it, and a restart would replay it
            assert "the records of this write may or may not be kept" in first.json()["error"], first.text
            assert first.headers.get("Retry-After")
            wait_for("/healthz/live names the failure", lambda: c.get("/healthz/live").status_code == 503, timeout=30)
            live = c.get("/healthz/live").json()
            assert live["live"] is False and "the node failed" in live["status"] and "WAL" in live["status"], live
            assert c.get("/healthz").status_code == 503
            assert c.get("/healthz/ready").status_code == 503

            wal_store.start(bucket="wal")  # the store answers again: the node stays failed until restarted
            again = _produce(c, "after-store-back")
            assert again.status_code == 503, again.text
            assert "the broker node failed" in again.json()["error"], again.text
            assert "may or may not be kept" not in again.json()["error"], again.text  # it was in no write
            made = c.post("/v1/topics", json={"name": "second", "partitions": 1})
            assert made.status_code in (201, 503), made.text  # never a 500
            assert c.get("/healthz/live").status_code == 503
        assert server.stop() == 0
        assert "internal error" not in server.log.read_text()

        server.port = free_port()
        server.start()
        with httpx.Client(base_url=server.url, timeout=60) as c:
            wait_for("ready after the restart", lambda: c.get("/healthz/ready").status_code == 200, timeout=60)
            assert c.get("/healthz/live").status_code == 200
            assert _keys(c) == acknowledged  # every acknowledged record; the refused ones not
            if made.status_code == 503:  # refused, yet perhaps created: a retry says which
                assert c.post("/v1/topics", json={"name": "second", "partitions": 1}).status_code in (201, 409)
            assert _produce(c, "after-restart").status_code == 200
            assert _keys(c) == [*acknowledged, "after-restart"]
    finally:
        server.stop()
