"""Two broker processes on one PostgreSQL metadata database with SeaweedFS as the store: a real `mqindex serve`
(node 0) and a second process (node 1) acting on a stale epoch, which is fenced and cannot commit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess

CHILD = Path(__file__).with_name("stale_broker_child.py")


def test_stale_broker_process_is_fenced(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> None:
    store = seaweedfs.store_url("mqindex", f"two-{uuid.uuid4().hex[:8]}")
    meta = pg_url()
    a = ServerProcess(tmp_path / "a", "--store", store, "--metadata", meta, "--node-id", "0").start()
    child = None
    try:
        assert httpx.post(f"{a.url}/v1/topics", json={"name": "f", "partitions": 1}).status_code == 201
        msgs = {"messages": [{"key": "k", "value": f"first-{i}"} for i in range(10)]}
        assert httpx.post(f"{a.url}/v1/topics/f/messages", json=msgs, timeout=60).status_code == 200
        assert a.stop(signal.SIGTERM) == 0  # clean shutdown: the partition's streams are CLOSED

        child = subprocess.Popen([sys.executable, str(CHILD), meta, store, "f"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
        assert child.stdout is not None and child.stdin is not None
        seen = json.loads(child.stdout.readline())
        assert seen["ready"] and seen["state"] == "CLOSED" and seen["end"] == 10

        a.start()  # node 0 takes the partition again at a higher epoch and goes on producing
        more = {"messages": [{"key": "k", "value": f"second-{i}"} for i in range(5)]}
        assert httpx.post(f"{a.url}/v1/topics/f/messages", json=more, timeout=60).status_code == 200

        child.stdin.write("go\n")
        child.stdin.flush()
        result = json.loads(child.stdout.readline())
        assert child.wait(60) == 0
        assert all(v.startswith("Fenced") for v in result.values()), result

        # node 0's data is whole and nothing of node 1's was applied
        r = httpx.get(f"{a.url}/v1/topics/f/partitions/0/messages", params={"offset": 0, "max": 100})
        body = r.json()
        assert [m["value"] for m in body["messages"]] == [f"first-{i}" for i in range(10)] + [
            f"second-{i}" for i in range(5)]
        assert body["next_offset"] == 15
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        a.stop(signal.SIGKILL)
