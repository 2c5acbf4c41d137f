"""A value no command can use is a usage error naming the flag (argparse's usage and one message, exit status 2,
nothing asked of the server), as a user running `mqindex` against a real server sees it: a count below 1 (before,
`query --max -1` answered "no messages with key" for a key that exists), a negative partition, offset or node,
a time that is not one, a URL without its scheme (--url or MQINDEX_URL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.api.server import ServerProcess, free_port

MQINDEX = str(Path(sys.executable).parent / "mqindex")
TIME_HELP = "is not a time (ISO 8601 like 2026-11-28T10:00:00, UTC without a zone, or milliseconds since the epoch)"


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("MQINDEX_TOKEN", "MQINDEX_URL")} | (env or {})
    return subprocess.run([MQINDEX, *args], capture_output=True, text=True, timeout=120, env=full, input=stdin)


def usage_error(r: subprocess.CompletedProcess[str], command: str, message: str) -> None:
    """What argparse prints for a bad argument: the command's usage, then `mqindex CMD: error: MESSAGE`."""
    lines = r.stderr.strip().splitlines()
    assert (r.returncode, r.stdout) == (2, ""), (r.returncode, r.stdout, r.stderr)
    assert lines[0].startswith(f"usage: mqindex {command} "), r.stderr
    assert lines[-1] == f"mqindex {command}: error: {message}", r.stderr


def test_numbers_no_command_can_use_are_usage_errors(console_server: ServerProcess) -> None:
    url = console_server.url
    auth = ("--url", url, "--token", "admin-tok")
    assert cli("topics", "create", "usage-orders", *auth).returncode == 0
    for value in ("v1", "v2", "v3"):
        r = cli("produce", "usage-orders", value, "--key", "k1", *auth)
        assert r.returncode == 0, r.stderr
    found = cli("query", "usage-orders", "k1", "--max", "1", *auth)
    assert found.returncode == 0 and len(found.stdout.strip().splitlines()) == 2, found.stderr  # k1 exists

    cases = [
        (("query", "usage-orders", "k1", "--max", "-1"), "query", "argument --max: must be at least 1 (got -1)"),
        (("query", "usage-orders", "k1", "--max", "0"), "query", "argument --max: must be at least 1 (got 0)"),
        (("query", "usage-orders", "k1", "--max", "ten"), "query", "argument --max: 'ten' is not a whole number"),
        (("consume", "usage-orders", "-p", "1", "-n", "-3"), "consume",
         "argument -n/--count: must be at least 1 (got -3)"),
        (("consume", "usage-orders", "-p", "0", "-n", "0"), "consume",
         "argument -n/--count: must be at least 1 (got 0)"),
        (("consume", "usage-orders", "-p", "-1"), "consume", "argument -p/--partition: must be at least 0 (got -1)"),
        (("consume", "usage-orders", "-p", "0", "-o", "-5"), "consume",
         "argument -o/--offset: must be at least 0 (got -5)"),
        (("produce", "usage-orders", "v", "--partition", "-1"), "produce",
         "argument --partition: must be at least 0 (got -1)"),
        (("reassign", "usage-orders", "-1", "--to", "0"), "reassign",
         "argument partition: must be at least 0 (got -1)"),
        (("reassign", "usage-orders", "0", "--to", "-1"), "reassign", "argument --to: must be at least 0 (got -1)"),
        (("topics", "create", "usage-none", "--partitions", "0"), "topics create",
         "argument --partitions: must be at least 1 (got 0)"),
        (("groups", "reset-offsets", "usage-group", "--to-offset", "-1", "--topic", "usage-orders"),
         "groups reset-offsets", "argument --to-offset: must be at least 0 (got -1)"),
    ]
    for args, command, message in cases:
        usage_error(cli(*args, *auth), command, message)
    r = cli("security", "scram-credential", "--iterations", "0", stdin="a-password\n")
    usage_error(r, "security scram-credential", "argument --iterations: must be 4096 to 1000000 (got 0)")

    # nothing reached the server: no topic made, no message produced
    assert "usage-none" not in cli("topics", "list", *auth).stdout.split()
    assert cli("consume", "usage-orders", "-p", "0", "-o", "3", *auth).stdout.startswith(
        "no messages in usage-orders-0 from offset 3: offset 3 is at or past its end offset 3")


def test_time_flags_name_the_flag_and_the_value(console_server: ServerProcess) -> None:
    url = console_server.url
    auth = ("--url", url, "--token", "admin-tok")
    for flag in ("--begin", "--end"):
        usage_error(cli("query", "orders", "k1", flag, "tomorrow", *auth), "query",
                    f"argument {flag}: 'tomorrow' {TIME_HELP}")
    usage_error(cli("groups", "reset-offsets", "g", "--to-datetime", "tomorrow", "--topic", "orders", *auth),
                "groups reset-offsets", f"argument --to-datetime: 'tomorrow' {TIME_HELP}")

    # the forms the help names still work: an ISO time without a zone (UTC), a date, milliseconds
    assert cli("topics", "create", "times", *auth).returncode == 0
    assert cli("produce", "times", "v", "--key", "k1", *auth).returncode == 0
    for begin in ("2020-01-01T00:00:00", "2020-01-01", "1577836800000"):
        r = cli("query", "times", "k1", "--begin", begin, "--json", *auth)
        assert r.returncode == 0 and '"value": "v"' in r.stdout, r.stderr
    # (a good --to-datetime, sent as milliseconds: tests/api/test_groups.py, against a server with a Kafka listener)


def test_a_url_without_its_scheme_says_so_and_where_it_came_from(console_server: ServerProcess) -> None:
    port = console_server.port
    usage_error(cli("query", "orders", "k1", "--url", f"localhost:{port}"), "query",
                f"argument --url: localhost:{port}: give the scheme, e.g. http://localhost:{port} "
                "(the URL must start with http:// or https://)")
    usage_error(cli("topics", "list", "--url", f"ftp://localhost:{port}"), "topics list",
                f"argument --url: ftp://localhost:{port}: the URL must start with http:// or https://")
    usage_error(cli("nodes", env={"MQINDEX_URL": f"localhost:{port}"}), "nodes",
                f"MQINDEX_URL=localhost:{port} (from the environment; --url overrides it): give the scheme, e.g. "
                f"http://localhost:{port} (the URL must start with http:// or https://)")
    # MQINDEX_URL with its scheme is the server asked; --url wins over it
    r = cli("topics", "list", "--token", "admin-tok", env={"MQINDEX_URL": console_server.url})
    assert r.returncode == 0, r.stderr
    r = cli("topics", "list", "--token", "admin-tok", "--url", console_server.url,
            env={"MQINDEX_URL": f"localhost:{port}"})
    assert r.returncode == 0, r.stderr
    dead = f"http://127.0.0.1:{free_port()}"
    r = cli("topics", "list", env={"MQINDEX_URL": dead})
    assert r.returncode == 1 and f"cannot reach {dead}" in r.stderr, r.stderr
