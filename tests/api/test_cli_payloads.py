"""What a real server stores, as the command line shows it: binary values produced from standard input come back
byte for byte, and `inspect-object --records` names every payload of the objects a serve uploaded (the Kafka
batches of a partition's data stream, produced over HTTP or by the CLI, and the partition state records of its
meta stream), in agreement with scrub."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.api.server import ServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")
BINARY = b"\x00\x01\xff\xfe" + bytes(range(256)) + b"\xed\xa0\x80"  # not UTF-8 (a lone surrogate's bytes too)


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([MQINDEX, *args], capture_output=True, input=stdin, timeout=120)


def test_binary_values_and_stored_payloads(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, "--kafka-listener", "").start()
    try:
        url = server.url
        assert httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 1}, timeout=60).status_code == 201
        r = httpx.post(f"{url}/v1/topics/orders/messages", timeout=60,
                       json={"messages": [{"key": "k1", "value": "text over HTTP"},
                                          {"key": "k2", "value": base64.b64encode(b"\xff\x00").decode(),
                                           "encoding": "base64"}]})
        assert r.status_code == 200, r.text
        r = cli("produce", "orders", "-", "--key", "bin", "--json", "--url", url, stdin=BINARY)
        assert r.returncode == 0 and r.stderr == b"", r.stderr
        msg_id = json.loads(r.stdout)[0]["msg_id"]
        r = cli("produce", "orders", "-", "--url", url, stdin="häagen\n".encode())  # UTF-8 text stays text
        assert r.returncode == 0, r.stderr

        got = json.loads(cli("get", msg_id, "--json", "--url", url).stdout)
        assert got["encoding"] == "base64" and base64.b64decode(got["value"]) == BINARY
        r = cli("consume", "orders", "-p", "0", "--json", "--url", url)
        page = json.loads(r.stdout)
        assert page["next_offset"] == 4
        values = [base64.b64decode(m["value"]) if m["encoding"] == "base64" else m["value"].encode()
                  for m in page["messages"]]
        assert values == [b"text over HTTP", b"\xff\x00", BINARY, "häagen\n".encode()]
        hits = json.loads(cli("query", "orders", "bin", "--json", "--url", url).stdout)
        assert [base64.b64decode(m["value"]) for m in hits] == [BINARY]
    finally:
        assert server.stop() == 0  # a clean stop uploads what the node holds
    objects = sorted(p for p in (data / "objects").rglob("*") if p.is_file() and "_kafka_mqindex" in p.parts)
    assert objects
    kinds = {"kafka": 0, "state": 0}
    for path in objects:
        r = cli("inspect-object", str(path), "--records")
        assert r.returncode == 0, r.stderr
        out = r.stdout.decode().splitlines()
        assert not any("not a Kafka RecordBatch" in line or "DAMAGED" in line for line in out), out
        for i, line in enumerate(out):
            if line.startswith("StreamRecordBatch"):
                follow = out[i + 1]
                assert follow.startswith("  batch baseOffset=") or " a partition state record (meta stream): " \
                    "start_offset=0 " in follow, follow
                kinds["kafka" if "batch" in follow else "state"] += 1
    assert kinds["kafka"] >= 1 and kinds["state"] >= 1, kinds
    r = cli("scrub", "--data-dir", str(data))
    assert r.returncode == 0 and r.stdout.decode().rstrip().endswith(": 0 damaged"), r.stderr
