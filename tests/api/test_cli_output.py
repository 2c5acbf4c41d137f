"""What the client commands print, against real servers: a reader that stops early (`| head -1`) ends the command
quietly with the status a Unix tool gets (141, 128 + SIGPIPE) and nothing on stderr; a missing key shows as "-"
as every table shows a missing value (not Python's None); a refusal says what was lacking once, then what to do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from api.security.tokens import fingerprint
from tests.api.server import ADMIN, ServerProcess

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MQINDEX_TOKEN", "MQINDEX_URL")}
    return subprocess.run([MQINDEX, *args], capture_output=True, text=True, timeout=120, env=env)


def test_a_pipe_closed_early_ends_the_command_quietly(console_server: ServerProcess) -> None:
    url = console_server.url
    r = httpx.post(f"{url}/v1/topics", json={"name": "crash", "partitions": 1}, headers=ADMIN, timeout=60)
    assert r.status_code == 201, r.text
    # 2000 rows of some 150 characters: far more than a pipe holds, so the command is still writing when head exits
    for first in (0, 1000):  # a request holds at most 1000 messages
        r = httpx.post(f"{url}/v1/topics/crash/messages", headers=ADMIN, timeout=60, json={
            "messages": [{"key": f"k{i}", "value": f"{i:060d}"} for i in range(first, first + 1000)]})
        assert r.status_code == 200, r.text
    for fmt in ((), ("--json",)):
        command = " ".join([MQINDEX, "consume", "crash", "-p", "0", "-n", "2000", "--url", url, "--token",
                            "admin-tok", *fmt])
        r = subprocess.run(["bash", "-c", f"{command} | head -1; exit ${{PIPESTATUS[0]}}"], capture_output=True,
                           text=True, timeout=120)
        assert (r.returncode, r.stderr) == (141, ""), (r.returncode, r.stderr)
        assert r.stdout.count("\n") == 1, r.stdout  # the first line only
        assert r.stdout.split() == (["{"] if fmt else ["MSG_ID", "PARTITION", "OFFSET", "KEY", "TIME", "VALUE"])
    # the whole output, read to its end: status 0
    whole = cli("consume", "crash", "-p", "0", "-n", "2000", "--url", url, "--token", "admin-tok")
    assert whole.returncode == 0 and len(whole.stdout.splitlines()) == 2001, whole.stderr


def test_a_message_without_a_key_shows_a_dash(console_server: ServerProcess) -> None:
    url = console_server.url
    auth = ("--url", url, "--token", "admin-tok")
    assert cli("topics", "create", "keyless", *auth).returncode == 0
    r = cli("produce", "keyless", "no key here", "--header", "KEYS=word-1", *auth)
    assert r.returncode == 0, r.stderr
    for args in (("consume", "keyless", "-p", "0"), ("query", "keyless", "word-1")):
        r = cli(*args, *auth)
        assert r.returncode == 0, r.stderr
        header, row = r.stdout.splitlines()
        assert header.split() == ["MSG_ID", "PARTITION", "OFFSET", "KEY", "TIME", "VALUE"]
        assert row.split()[1:4] == ["0", "0", "-"] and row.endswith("no key here"), r.stdout
        assert "None" not in r.stdout


def test_a_refusal_says_what_was_lacking_once(tmp_path: Path) -> None:
    admin, reader = "admin-token-0123456789abcdef", "reader-token-0123456789abcdef"
    server = ServerProcess(tmp_path / "data", "--kafka-listener", "",
                           env={"MQINDEX_TOKENS": f"{admin}=read,produce,admin;{reader}=read"}).start()
    try:
        url = server.url
        r = cli("topics", "create", "team-b.orders", "--url", url, "--token", reader)
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr == ("mqindex topics: error: 403: token lacks the 'admin' scope (give a token that has it "
                            "with --token or MQINDEX_TOKEN)\n")
        # an ACL's refusal: not a missing scope, and not said to be one
        assert cli("topics", "create", "team-b.orders", "--url", url, "--token", admin).returncode == 0
        r = cli("acls", "add", "--principal", f"User:token-{fingerprint(reader)}", "--topic", "team-a.",
                "--prefixed", "--operation", "read", "--url", url, "--token", admin)
        assert r.returncode == 0, r.stderr
        r = cli("query", "team-b.orders", "k1", "--url", url, "--token", reader)
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr == ("mqindex query: error: 403: not authorized (give a token allowed to do this with --token "
                            "or MQINDEX_TOKEN)\n")
    finally:
        server.stop()


def test_a_query_cut_at_max_says_more_have_the_key(console_server: ServerProcess) -> None:
    url = console_server.url
    auth = ("--url", url, "--token", "admin-tok")
    assert cli("topics", "create", "many", *auth).returncode == 0
    r = httpx.post(f"{url}/v1/topics/many/messages", headers=ADMIN, timeout=60,
                   json={"messages": [{"key": "same", "value": f"v{i}"} for i in range(5)]})
    assert r.status_code == 200, r.text
    cut = cli("query", "many", "same", "--max", "3", *auth)
    assert cut.returncode == 0 and len(cut.stdout.splitlines()) == 4, cut.stdout
    assert cut.stderr == "(the newest 3 shown; more have this key: --max N shows more)\n", cut.stderr
    whole = cli("query", "many", "same", "--max", "5", *auth)
    assert whole.returncode == 0 and len(whole.stdout.splitlines()) == 6 and whole.stderr == "", whole.stderr
