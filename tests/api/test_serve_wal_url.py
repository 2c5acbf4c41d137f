"""`mqindex serve --wal URL` refuses, before it registers anything in the metadata, a shared WAL whose endpoint
does not parse or whose objects would mix with the object store's (the same location, or inside its prefix)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess, free_port

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def schema_exists(pg_dsn: str, metadata: str) -> bool:
    schema = metadata.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                           (schema,)).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize(("wal", "says"), [
    # the README's old cluster example: "$STORE-wal" appended to the endpoint
    ("{store}-wal", "endpoint 'http://127.0.0.1:{port}-wal' is not http(s)://HOST[:PORT]"),
    ("{store}", "is the object store itself"),
    ("s3://mqindex/prod/wal?endpoint={endpoint}", "lies inside the object store's location"),
    ("s3://mqindex/prod?endpoint=http://127.0.0.1:{port}/", "is the object store itself"),
])
def test_wal_url_refused_before_anything_is_registered(tmp_path: Path, seaweedfs: SeaweedFS, pg_dsn: str,
                                                      pg_url: Callable[[], str], wal: str, says: str) -> None:
    store = seaweedfs.store_url("mqindex", "prod")
    metadata = pg_url()
    wal = wal.format(store=store, endpoint=seaweedfs.endpoint, port=seaweedfs.s3_port)
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()),
                        "--store", store, "--metadata", metadata, "--wal", wal],
                       capture_output=True, text=True, timeout=90, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    errors = [ln for ln in out.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0].startswith(f"mqindex serve: error: --wal {wal}"), out
    assert says.format(port=seaweedfs.s3_port) in errors[0], errors[0]
    assert "serving" not in out and "Traceback" not in out
    assert not schema_exists(pg_dsn, metadata)  # nothing registered: the metadata was not even opened
    assert not (tmp_path / "data").exists()


def test_local_wal_inside_a_local_store_is_refused(tmp_path: Path) -> None:
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()),
                        "--store", f"file://{tmp_path}/objects", "--wal", f"file://{tmp_path}/objects/wal"],
                       capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith(f"mqindex serve: error: --wal file://{tmp_path}/objects/wal "
                                                        "lies inside the object store's location"), r.stderr
    assert not (tmp_path / "data").exists()


def test_wal_beside_the_store_is_served(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> None:
    """The form to use: a prefix of its own beside the store's, on the same endpoint."""
    store = seaweedfs.store_url("mqindex", "prod")
    wal = seaweedfs.store_url("mqindex", "prod-wal")
    server = ServerProcess(tmp_path / "data", "--store", store, "--wal", wal, "--metadata", pg_url())
    try:
        server.start()
    finally:
        assert server.stop() == 0
