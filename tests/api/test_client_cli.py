"""`mqindex produce | consume | query | get` against a real server process: tables, --json, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.api.server import ServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def cli(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MQINDEX, *args, "--url", url], capture_output=True, text=True, input=stdin, timeout=60)


def test_cli_round_trip(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        url = server.url
        import httpx

        assert httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
        r = cli(url, "produce", "orders", "first", "--key", "order-1", "--header", "KEYS=cust-9 o1", "--json")
        assert r.returncode == 0, r.stderr
        first = json.loads(r.stdout)[0]
        r = cli(url, "produce", "orders", "-", "--key", "order-1", "--partition", str(first["partition"]),
                stdin="second from stdin")
        assert r.returncode == 0 and "MSG_ID" in r.stdout and r.stderr == ""

        r = cli(url, "query", "orders", "cust-9", "--json")
        assert [m["value"] for m in json.loads(r.stdout)] == ["first"]
        r = cli(url, "query", "orders", "order-1")
        lines = r.stdout.strip().splitlines()
        assert lines[0].split()[:3] == ["MSG_ID", "PARTITION", "OFFSET"] and len(lines) == 3
        assert "second from stdin" in lines[1] and "first" in lines[2]  # newest first

        r = cli(url, "get", first["msg_id"], "--json")
        assert json.loads(r.stdout)["value"] == "first"
        r = cli(url, "consume", "orders", "-p", str(first["partition"]), "-o", "0", "-n", "10", "--json")
        page = json.loads(r.stdout)
        assert [m["value"] for m in page["messages"]] == ["first", "second from stdin"] and page["next_offset"] == 2

        for args, needle in [(("query", "nope", "k"), "404"), (("get", "xyz"), "400"),
                             (("produce", "orders", "v", "--header", "novalue"), "KEY=VALUE")]:
            r = cli(url, *args)
            assert r.returncode == 1 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        r = cli(url, "query", "orders", "k", "--begin", "yesterday")  # a usage error: argparse's, exit status 2
        assert r.returncode == 2 and "argument --begin: 'yesterday' is not a time" in r.stderr, r.stderr
        r = subprocess.run([MQINDEX, "query", "orders", "k", "--url", "http://127.0.0.1:1"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and "cannot reach" in r.stderr and "mqindex serve" in r.stderr
    finally:
        server.stop()
