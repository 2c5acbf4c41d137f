"""Damage in the store seen through a real `mqindex serve` over one HTTP/1.1 connection: a message inside a
damaged object answers the JSON 502 naming the object, the connection stays open, and the next request on
it is served."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

import httpx

from tests.api.server import ServerProcess


def _objects(data_dir: Path) -> list[Path]:
    return sorted(p for p in (data_dir / "objects").rglob("*") if p.is_file() and not p.name.startswith("."))


def _uploaded(url: str) -> bool:
    """The records are in a committed object and no longer in the node's cache (reads go to the object)."""
    objects = httpx.get(f"{url}/v1/console/objects").json()
    committed = int(objects["stream_set_objects"]["count"]) + int(objects["stream_objects"]["count"])
    return committed > 0 and httpx.get(f"{url}/v1/console/node").json()["wal_bytes_not_uploaded"] == 0


def test_damaged_object_is_a_502_and_the_connection_is_kept(tmp_path: Path) -> None:
    s = ServerProcess(tmp_path / "d", "--upload-interval-s", "0.2").start()
    try:
        assert httpx.post(f"{s.url}/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
        first = httpx.post(f"{s.url}/v1/topics/t/messages",
                           json={"messages": [{"key": "a", "value": "x" * 2000} for _ in range(5)]}).json()
        deadline = time.monotonic() + 30
        while not _uploaded(s.url):  # the upload's commit follows the object's write, the cache's release the commit
            assert time.monotonic() < deadline, "no object uploaded, committed and released from the cache"
            time.sleep(0.05)
        damaged = _objects(s.data_dir)
        assert damaged
        assert httpx.post(f"{s.url}/v1/topics/t/messages",
                          json={"messages": [{"key": "b", "value": "fresh"}]}).status_code == 200
        for path in damaged:  # flip a byte in the middle of each object's payload
            raw = bytearray(path.read_bytes())
            raw[len(raw) // 3] ^= 0xFF
            path.write_bytes(bytes(raw))

        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        conn.request("GET", f"/v1/messages/{first['results'][0]['msg_id']}")
        sock = conn.sock
        r = conn.getresponse()
        body = json.loads(r.read())
        assert r.status == 502 and body["object"] and body["check"] and body["field"] is None, body
        assert r.getheader("content-type", "").startswith("application/json")
        conn.request("GET", "/v1/topics/t/partitions/0/messages?offset=5&max=10")  # the same connection
        assert conn.sock is sock
        r2 = conn.getresponse()
        after = json.loads(r2.read())
        assert r2.status == 200 and [m["value"] for m in after["messages"]] == ["fresh"]
        conn.close()
    finally:
        s.stop()
