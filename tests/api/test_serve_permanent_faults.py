"""`mqindex serve` fails at once, saying what to do, for a start-up fault that waiting cannot heal (new-user
walkthrough): a PostgreSQL database or role that does not exist (they were retried for the whole start-up wait
and ended with "(still failing after 10s)"), a bucket that does not exist (the answer names `create_bucket=1`,
which then starts the server), and a data dir the user cannot write (it printed only `[Errno 30] Read-only file
system: '.../broker.lock'`). A refused connection is still retried (tests/api/test_serve_startup_checks.py).

The time bounds are the code path's, not performance: each start is given a start-up wait of WAIT_S, which a
retried fault would spend whole, and must end well before it (at any load: a start takes seconds, not minutes)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, free_port
from tests.api.test_serve_startup_checks import MQINDEX, one_error_line, serve

WAIT_S = 120  # --startup-wait-s of every start here: a fault retried would take this long


def with_database(dsn: str, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(dsn)
    netloc = parts.netloc if user is None else f"{user}@{parts.netloc.rpartition('@')[2]}"
    return urlunsplit(("postgresql", netloc, f"/{database}" if database else parts.path, "", ""))


def test_a_database_that_does_not_exist_fails_at_once_saying_how_to_create_it(tmp_path: Path, pg_dsn: str) -> None:
    name = f"nosuchdb_{uuid.uuid4().hex[:8]}"
    r, took = serve(tmp_path, "--port", str(free_port()), "--startup-wait-s", str(WAIT_S),
                    "--metadata", with_database(pg_dsn, database=name), timeout=WAIT_S + 60)
    line = one_error_line(r)
    assert f'database "{name}" does not exist: create it (createdb {name}, or CREATE DATABASE "{name}" in psql), ' \
           "or name an existing database in the URL" in line, line
    assert "still failing" not in line
    assert took < WAIT_S / 2, took  # not the start-up wait


def test_a_role_that_does_not_exist_fails_at_once_saying_what_to_give(tmp_path: Path, pg_dsn: str) -> None:
    user = f"nouser_{uuid.uuid4().hex[:8]}"
    r, took = serve(tmp_path, "--port", str(free_port()), "--startup-wait-s", str(WAIT_S),
                    "--metadata", with_database(pg_dsn, user=user), timeout=WAIT_S + 60)
    line = one_error_line(r)
    assert f'role "{user}" does not exist: name an existing user in the URL' in line, line
    assert "still failing" not in line
    assert took < WAIT_S / 2, took


def test_a_bucket_that_does_not_exist_names_create_bucket_which_then_starts(tmp_path: Path,
                                                                             seaweedfs: SeaweedFS) -> None:
    bucket = f"nosuch-{uuid.uuid4().hex[:8]}"
    store = seaweedfs.store_url(bucket, "prod")
    r, took = serve(tmp_path, "--port", str(free_port()), "--startup-wait-s", str(WAIT_S), "--store", store,
                    timeout=WAIT_S + 60)
    line = one_error_line(r)
    assert line.startswith(f"mqindex serve: error: --store {store} cannot be used: NoSuchBucket"), line
    assert line.endswith("create the bucket, or add create_bucket=1 to the URL's parameters "
                         "(s3://BUCKET/PREFIX?endpoint=...&create_bucket=1) for mqindex to create it"), line
    assert took < WAIT_S / 2, took
    server = ServerProcess(tmp_path / "data", "--store", seaweedfs.store_url(bucket, "prod", create_bucket="1"),
                           "--kafka-listener", "")
    try:
        server.start()
    finally:
        assert server.stop() == 0


def test_a_read_only_data_dir_says_it_must_be_writable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    port = str(free_port())
    if os.geteuid() == 0:  # root writes through modes: a read-only file system, mounted in a namespace of its own
        r = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o ro tmpfs "$1" && shift && exec "$@"', "-",
                            str(data), MQINDEX, "serve", "--data-dir", str(data), "--port", port],
                           capture_output=True, text=True, timeout=90, cwd=tmp_path)
        why = "Read-only file system"
    else:
        data.chmod(0o555)
        r = subprocess.run([MQINDEX, "serve", "--data-dir", str(data), "--port", port], capture_output=True,
                           text=True, timeout=90, cwd=tmp_path)
        why = "Permission denied"
    line = one_error_line(r)
    assert line.startswith(f"mqindex serve: error: --data-dir {data}: cannot write there ({why}): the data dir must "
                           "be a folder the user running mqindex ("), line
    assert "give another with --data-dir (data_dir in the config)" in line and "broker.lock" not in line, line
