"""A running `mqindex serve` whose SeaweedFS stops: readiness turns false (liveness stays ok), the retry warnings
are rate-limited, readiness turns true again once SeaweedFS is back; a SIGTERM while SeaweedFS is down ends in
bounded time and every acknowledged message is there after the next start.

The test runs its own SeaweedFS, so the session's is not disturbed."""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, free_port, get, post, wait_for

#: the retry warnings of one backend and operation come at most once per this many seconds
WARN_EVERY_S = 30
#: a SIGTERM while the store does not answer ends within this many seconds
STOP_BOUND_S = 30


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[SeaweedFS]:
    server = SeaweedFS(tmp_path / "weed")
    try:
        server.start(bucket="mqindex")
        yield server
    finally:
        server.stop()


def ready(url: str) -> httpx.Response:
    return httpx.get(url + "/healthz/ready", timeout=30)


def produce(url: str, values: list[str]) -> None:
    r = post(url + "/v1/topics/orders/messages", json={"messages": [{"value": v} for v in values]})
    assert r.status_code == 200, r.text


def stored(url: str) -> list[str]:
    r = get(url + "/v1/topics/orders/partitions/0/messages", params={"offset": 0, "max": 1000})
    assert r.status_code == 200, r.text
    return [m["value"] for m in r.json()["messages"]]


def retry_warnings(log_text: str) -> dict[str, list[float]]:
    """(backend, op) -> the times of the 'transient storage fault' warnings the server logged."""
    out: dict[str, list[float]] = defaultdict(list)
    for line in log_text.splitlines():
        if "transient storage fault" in line:
            when = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            backend = re.search(r'backend="([^"]*)"', line)
            op = re.search(r'op="([^"]*)"', line)
            out[f"{backend and backend[1]}/{op and op[1]}"].append(when)
    return out


@pytest.mark.slow(seconds=40)
def test_store_outage_turns_not_ready_then_ready_and_stop_is_bounded(tmp_path: Path, weed: SeaweedFS) -> None:
    server = ServerProcess(tmp_path / "data", "--store", weed.store_url("mqindex", "outage"),
                           "--upload-interval-s", "0.5")
    try:
        server.start()
        url = server.url
        wait_for("ready", lambda: ready(url).status_code == 200, timeout=60)
        assert post(url + "/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
        produce(url, ["a", "b", "c"])

        weed.stop()
        outage = time.monotonic()
        wait_for("not ready", lambda: ready(url).status_code == 503, timeout=30)
        r = ready(url)
        assert r.json()["ready"] is False and "object store (--store) does not answer" in r.json()["status"], r.text
        assert httpx.get(url + "/healthz", timeout=30).json() == {"status": "ok"}  # alive: do not restart it
        produce(url, ["d", "e"])  # acknowledged: in the WAL, uploaded once the store is back
        # an outage of 12 s: retried requests warn once per backend and operation, not at every attempt
        wait_for("12 s of outage", lambda: time.monotonic() - outage > 12, timeout=20, interval=0.5)
        warned = retry_warnings(server.log.read_text())
        assert warned, "no retry warning during the outage"
        for what, times in warned.items():
            gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
            assert all(g >= WARN_EVERY_S - 1 for g in gaps), (what, gaps)

        weed.start(bucket="mqindex")  # the same ports and data
        wait_for("ready again", lambda: ready(url).status_code == 200, timeout=60)
        assert stored(url) == ["a", "b", "c", "d", "e"]

        weed.stop()
        wait_for("not ready again", lambda: ready(url).status_code == 503, timeout=30)
        produce(url, ["f", "g"])
        started = time.monotonic()
        assert server.stop(signal.SIGTERM, timeout=STOP_BOUND_S + 30) == 0
        took = time.monotonic() - started
        assert took < STOP_BOUND_S, f"SIGTERM took {took:.1f}s"
        assert "the final upload is tried for 2.0s only" in server.log.read_text()

        weed.start(bucket="mqindex")
        server.port = free_port()
        server.start()
        assert stored(server.url) == ["a", "b", "c", "d", "e", "f", "g"]  # nothing acknowledged was lost
    finally:
        server.stop()
