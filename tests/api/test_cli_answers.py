"""What the client commands answer when there is little to show or something is in the way, against real servers:
empty reads say the partition's offsets, a query with no hit says so, times are ISO 8601 with a zone, `nodes`
shows the Kafka address, a reassignment to the current leader changes nothing and says so, and auth and
connection errors say what to do."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.api.server import ServerProcess, free_port, wait_for

MQINDEX = str(Path(sys.executable).parent / "mqindex")
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00"


def cli(url: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    full = {k: v for k, v in os.environ.items() if k not in ("MQINDEX_TOKEN", "MQINDEX_URL")} | (env or {})
    return subprocess.run([MQINDEX, *args, "--url", url], capture_output=True, text=True, timeout=120, env=full)


def ok(url: str, *args: str) -> str:
    r = cli(url, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_answers_say_what_there_is(tmp_path: Path) -> None:
    kafka = f"127.0.0.1:{free_port()}"
    server = ServerProcess(tmp_path / "data", "--kafka-listener", kafka, "--maintenance-interval-s", "0.2",
                           "--upload-interval-s", "0.1").start()
    try:
        url = server.url
        ok(url, "topics", "create", "orders")
        out = ok(url, "produce", "orders", "v1", "--key", "k1").splitlines()
        assert out[0].split() == ["MSG_ID", "PARTITION", "OFFSET", "TIME"]
        assert re.fullmatch(rf"[0-9a-f]{{32}}\s+0\s+0\s+{ISO}", out[1]), out
        ok(url, "produce", "orders", "v2", "--key", "k1")
        table = ok(url, "query", "orders", "k1").splitlines()
        assert len(table) == 3 and all(re.search(ISO, line) for line in table[1:]), table

        assert ok(url, "consume", "orders", "-p", "0", "-o", "5").strip() == (
            "no messages in orders-0 from offset 5: offset 5 is at or past its end offset 2 (the next message "
            "produced gets offset 2); it holds offsets 0 to 1")
        page = json.loads(ok(url, "consume", "orders", "-p", "0", "-o", "1", "--json"))
        assert [m["value"] for m in page["messages"]] == ["v2"]
        assert (page["next_offset"], page["start_offset"], page["end_offset"]) == (2, 0, 2)
        page = json.loads(ok(url, "consume", "orders", "-p", "0", "-o", "9", "--json"))
        assert page["messages"] == [] and page["end_offset"] == 2 and "next_offset" in page
        assert ok(url, "query", "orders", "nobody").strip() == "no messages with key 'nobody' in topic orders"
        assert ok(url, "query", "orders", "nobody", "--begin", "2026-01-01T00:00:00+00:00", "--end",
                  "1767312000000").strip() == ("no messages with key 'nobody' in topic orders stored from "
                                               "2026-01-01T00:00:00.000+00:00 to 2026-01-02T00:00:00.000+00:00")

        # below a start that retention raised
        ok(url, "topics", "create", "brief", "--retention-ms", "1")
        for i in range(3):
            ok(url, "produce", "brief", f"m{i}")

        def start() -> int:
            return int(json.loads(ok(url, "topics", "describe", "brief", "--json"))["partition_details"][0][
                "start_offset"])

        wait_for("retention raises the start of brief-0", lambda: start() == 3, timeout=60, interval=0.3)
        assert ok(url, "consume", "brief", "-p", "0", "-o", "0").strip() == (
            "no messages in brief-0 from offset 0: offset 0 is below its start offset 3 (older messages were "
            "removed); it holds no messages")

        nodes = json.loads(ok(url, "nodes", "--json"))
        assert nodes[0]["kafka"] == kafka
        table = ok(url, "nodes").splitlines()
        assert table[0].split() == ["NODE_ID", "EPOCH", "STATE", "HTTP", "KAFKA", "LEASE_EXPIRES", "PARTITIONS"]
        assert table[1].split()[3:5] == [url, kafka] and re.fullmatch(ISO, table[1].split()[5])

        def leader_epoch() -> int:
            return int(json.loads(ok(url, "topics", "describe", "orders", "--json"))["partition_details"][0][
                "leader_epoch"])

        before = leader_epoch()
        assert ok(url, "reassign", "orders", "0", "--to", "0").strip() == (
            f"orders-0: node 0 leads it already; nothing moved (leader epoch {before})")
        moved = json.loads(ok(url, "reassign", "orders", "0", "--to", "0", "--json"))
        assert moved["unchanged"] is True and moved["leader_epoch"] == before
        assert leader_epoch() == before
        assert ok(url, "consume", "orders", "-p", "0", "-n", "5", "--json").count('"msg_id"') == 2
    finally:
        server.stop()


def test_auth_and_connection_errors_say_what_to_do(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--kafka-listener", "",
                           env={"MQINDEX_TOKENS": "readerTOKENsecret0001=read;adminTOKENsecret00002=admin"}).start()
    try:
        url = server.url
        r = cli(url, "topics", "list")
        assert r.returncode == 1 and r.stderr.startswith("mqindex topics: error: 401: "), r.stderr
        assert "--token" in r.stderr and "MQINDEX_TOKEN" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        r = cli(url, "topics", "create", "orders", "--token", "readerTOKENsecret0001")
        assert r.returncode == 1 and r.stderr.startswith("mqindex topics: error: 403: "), r.stderr
        assert r.stderr.strip().endswith("403: token lacks the 'admin' scope (give a token that has it with --token "
                                         "or MQINDEX_TOKEN)"), r.stderr
        r = cli(url, "topics", "list", env={"MQINDEX_TOKEN": "readerTOKENsecret0001"})
        assert r.returncode == 0 and r.stdout.strip() == "no topics", r.stderr
    finally:
        server.stop()
    port = free_port()
    r = cli(f"http://127.0.0.1:{port}", "get", "00000001000000000000000000000000")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert f"cannot reach http://127.0.0.1:{port}" in r.stderr and "is `mqindex serve` running there?" in r.stderr
    assert "--url" in r.stderr and "MQINDEX_URL" in r.stderr
